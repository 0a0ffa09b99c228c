"""Timing profiles (model x hardware) for the simulated engine, as data.

A profile says how long things take on one model server: a scheduler step as a function of
what the step runs (prefill chunks, decoding sequences and their context lengths), the vision
encoder per media item as a function of its tokens, and CPU preprocessing per item. It also
carries the engine defaults that belong to the model and GPU (KV capacity, token budgets).

Profiles ship as YAML under ``src/mmgate/sim/profiles/``; :func:`load_profile` takes a shipped
name (``qwen2-vl-2b-rtx4060``) or a path to a user's own file. Decoding is strict: an unknown or
misspelt field is an error naming it. docs/sim.md explains every field and how to fit one.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from importlib import resources
from pathlib import Path

import msgspec
import yaml

from mmgate.errors import did_you_mean
from mmgate.tokens import family_for_model

__all__ = [
    "EngineDefaults",
    "KVMemory",
    "MediaLoad",
    "ModalityCosts",
    "Noise",
    "Poly",
    "Preprocess",
    "Profile",
    "ProfileError",
    "StepTiming",
    "Transfer",
    "available_profiles",
    "family_of",
    "fit_poly",
    "load_profile",
]


class ProfileError(ValueError):
    """A profile could not be found or decoded."""


class Poly(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """``c0 + c1*t + c2*t^2`` milliseconds for an item of ``t`` tokens."""

    c0_ms: float = 0.0
    c1_ms_per_token: float = 0.0
    c2_ms_per_token2: float = 0.0

    def ms(self, tokens: int) -> float:
        return self.c0_ms + tokens * (self.c1_ms_per_token + tokens * self.c2_ms_per_token2)


class StepTiming(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Milliseconds of one scheduler step (the LM forward pass and sampling).

    step = base_ms
         + [any prefill] prefill_fixed_ms
         + sum over prefill chunks of  L * (prefill_ms_per_token
                                            + prefill_attention_ms * (start + L/2))
         + decode_ms_per_seq * decoding sequences
         + decode_ms_per_context_token * (sum of their context lengths)
         + decode_ms_per_max_context_token * (longest context among them)

    where a chunk computes ``L`` new tokens after ``start`` already-computed ones, so the
    attention term is the number of (query, key) pairs. Encoder time is added on top.
    """

    base_ms: float
    prefill_fixed_ms: float = 0.0
    prefill_ms_per_token: float = 0.0
    prefill_attention_ms: float = 0.0
    decode_ms_per_seq: float = 0.0
    decode_ms_per_context_token: float = 0.0
    decode_ms_per_max_context_token: float = 0.0


class Preprocess(Poly, frozen=True, forbid_unknown_fields=True):
    """CPU preprocessing (HF processor) per media item, plus a fixed per-request part.
    ``bytes_per_token`` sizes an item's processed tensors in the processor cache."""

    per_request_ms: float = 0.0
    bytes_per_token: int = 18_816


MEASURED_DECODE_MS_PER_MEGAPIXEL = {"jpeg": 5.694, "png": 19.069}
"""Pillow decode + RGB conversion per megapixel, by format, measured on a 2-core x86 CPU (the
project's development machine; ``mmgate bench media-load``, docs/benchmarks/media-load.json)."""


def _measured_decode_rates() -> dict[str, float]:
    return dict(MEASURED_DECODE_MS_PER_MEGAPIXEL)


class MediaLoad(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """What the API-server process does with every inline media item before the HF processor:
    base64-decode the payload, hash the file bytes (vLLM's ``mm_hash``: blake3 of the original
    encoded file), open and decode the image to RGB pixels.

    vLLM does this for every request, processor-cache and encoder-cache hits included (the hash is
    the cache key, so it must be computed first, and the image is loaded while the chat messages
    are parsed). Milliseconds per item:

        per_item_ms + base64_ms_per_mib * (base64 MiB) + hash_ms_per_mib * (file MiB)
                    + decode_ms_per_megapixel[format] * (megapixels, images only)

    The defaults were measured on a 2-core x86 CPU with real JPEG and PNG files (``mmgate bench
    media-load``, docs/benchmarks/media-load.json); vLLM does this work on the host CPU as well,
    and a faster server core shortens it. A format without its own rate (webp, gif, ...) uses
    ``other_decode_ms_per_megapixel`` (PNG's rate, the dearer of the two measured). Video and
    audio pay base64 and hash here; a clip's frame decode is its modality's ``load``
    (:class:`ModalityCosts`), audio resampling is not modelled. URL media:
    the fetch is not modelled unless the profile sets ``url_fetch_ms`` (a fixed cost per URL
    item; 0 by default); its decode is charged from the probed or configured size.
    """

    per_item_ms: float = 0.674
    base64_ms_per_mib: float = 0.0928
    hash_ms_per_mib: float = 0.3048
    decode_ms_per_megapixel: dict[str, float] = msgspec.field(default_factory=_measured_decode_rates)
    other_decode_ms_per_megapixel: float = 19.069
    url_fetch_ms: float = 0.0


MODALITIES = ("image", "video", "audio")


class ModalityCosts(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A modality's own encoder and HF-processor costs, where its tower or processor is not the
    profile's vision one: an omni model's audio tower is a Whisper-style encoder with windowed
    attention (linear in the clip's length, far cheaper per token than the ViT), and its audio
    processor pads every clip to a fixed window before the mel spectrogram (a fixed cost per item).
    Each field left out falls back to the profile's ``encoder`` / ``preprocess``. The encoder cost
    is per item of ``t`` tokens like ``encoder``; with ``--mm-encoder-tp-mode data`` each lane runs
    it unchanged. ``bytes_per_token`` sizes the modality's processed tensors in the processor cache.
    ``load`` is media-loading work per item of ``t`` tokens beyond decoding the payload (a clip's
    frames: vLLM's video loader decodes them while it loads the part), paid on every request, on
    the loading threads, processor-cache hits included; none when left out."""

    encoder: Poly | None = None
    preprocess: Poly | None = None
    bytes_per_token: int | None = None
    load: Poly | None = None


class KVMemory(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """KV capacity from memory arithmetic, as vLLM sizes it:
    ``(gpu_memory_gb * utilization - weights_gb - reserved_gb) * 1e9 / kv_bytes_per_token``."""

    gpu_memory_gb: float
    utilization: float
    weights_gb: float
    kv_bytes_per_token: int
    reserved_gb: float = 0.0

    def tokens(self) -> int:
        free = (self.gpu_memory_gb * self.utilization - self.weights_gb - self.reserved_gb) * 1e9
        return max(0, int(free // self.kv_bytes_per_token))


class EngineDefaults(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """vLLM settings this model/GPU pair runs with unless the engine config overrides them.
    KV capacity is either ``kv_tokens`` or ``kv_memory`` (not both)."""

    max_num_batched_tokens: int = 2048
    max_num_seqs: int = 256
    block_size: int = 16
    kv_tokens: int | None = None
    kv_memory: KVMemory | None = None
    max_model_len: int = 32_768

    def kv_capacity_tokens(self) -> int:
        if self.kv_memory is not None:
            return self.kv_memory.tokens()
        if self.kv_tokens is not None:
            return self.kv_tokens
        raise ProfileError("engine needs kv_tokens or kv_memory")


class Noise(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Gaussian noise: every duration is multiplied by ``1 + N(0, relative_sd)`` (seeded)."""

    relative_sd: float = 0.0


class Transfer(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """What moving a request's state between pods costs on this hardware: one visual token's
    encoder output (an encode pod to its consumer) and one prompt token's KV (a prefill pod to
    a decode pod), in bytes, over CPU shared memory on one host or the network between hosts
    (effective GB/s)."""

    ec_bytes_per_token: int
    kv_bytes_per_token: int
    shared_memory_gb_per_s: float
    network_gb_per_s: float

    def seconds_per_token(self, path: str) -> tuple[float, float]:
        """(encoder output, KV) seconds per token over ``path`` (``shared-memory``, ``network``)."""
        if path == "shared-memory":
            rate = self.shared_memory_gb_per_s
        elif path == "network":
            rate = self.network_gb_per_s
        else:
            raise ValueError(f"transfer path must be 'shared-memory' or 'network', not {path!r}")
        return self.ec_bytes_per_token / (rate * 1e9), self.kv_bytes_per_token / (rate * 1e9)


class Profile(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One model server. ``encoder`` is one item's encoder time as the server runs it by default
    (vLLM's ``--mm-encoder-tp-mode weights``: a TP replica shards the encoder's weights over its
    ``tensor_parallel_size`` GPUs, items one after another). ``encoder_lane`` is one item on one
    GPU holding the whole encoder, what each GPU runs in ``--mm-encoder-tp-mode data`` (the items
    of a step split over the GPUs); without it the lane costs ``encoder`` (a vision encoder
    this small gains little from tensor parallelism, its per-layer all-reduce eats the split).
    ``transfer``: the disaggregation transfer costs (without it the simulator's defaults).
    ``modalities``: per-modality encoder and processor costs (:class:`ModalityCosts`) for models
    whose video or audio is not priced like an image."""

    name: str
    step: StepTiming
    encoder: Poly
    preprocess: Preprocess
    engine: EngineDefaults
    noise: Noise = Noise()
    media_load: MediaLoad = MediaLoad()
    tensor_parallel_size: int = 1
    encoder_lane: Poly | None = None
    transfer: Transfer | None = None
    modalities: dict[str, ModalityCosts] = msgspec.field(default_factory=dict)
    model: str = ""
    hardware: str = ""
    description: str = ""
    sources: str = ""

    def __post_init__(self) -> None:
        e = self.engine
        if e.kv_tokens is not None and e.kv_memory is not None:
            raise ProfileError(f"profile {self.name!r}: give engine.kv_tokens or engine.kv_memory, not both")
        if e.kv_tokens is None and e.kv_memory is None:
            raise ProfileError(f"profile {self.name!r}: engine needs kv_tokens or kv_memory")
        if min(e.max_num_batched_tokens, e.max_num_seqs, e.block_size) <= 0:
            raise ProfileError(f"profile {self.name!r}: engine sizes must be positive")
        if self.tensor_parallel_size < 1:
            raise ProfileError(f"profile {self.name!r}: tensor_parallel_size must be at least 1")
        t = self.transfer
        if t is not None and min(t.shared_memory_gb_per_s, t.network_gb_per_s) <= 0:
            raise ProfileError(f"profile {self.name!r}: transfer bandwidths must be positive")
        for modality, costs in self.modalities.items():
            if modality not in MODALITIES:
                raise ProfileError(
                    f"profile {self.name!r}: modalities.{modality} is not a modality"
                    f"{did_you_mean(modality, MODALITIES)}; use one of {', '.join(MODALITIES)}"
                )
            if costs.bytes_per_token is not None and costs.bytes_per_token < 0:
                raise ProfileError(
                    f"profile {self.name!r}: modalities.{modality}.bytes_per_token must be >= 0"
                )

    def modality_encoders(self) -> dict[str, Poly]:
        """The per-modality encoders the profile gives (modalities without one use ``encoder``)."""
        return {m: c.encoder for m, c in self.modalities.items() if c.encoder is not None}

    def modality_loads(self) -> dict[str, Poly]:
        """The per-modality load work the profile gives (a clip's frame decode)."""
        return {m: c.load for m, c in self.modalities.items() if c.load is not None}

    def preprocess_for(self, modality: str) -> tuple[Poly, int]:
        """One item's HF-processor time and its processed bytes per token, for ``modality``."""
        costs = self.modalities.get(modality)
        pre = self.preprocess
        if costs is None:
            return pre, pre.bytes_per_token
        poly = costs.preprocess if costs.preprocess is not None else pre
        size = costs.bytes_per_token if costs.bytes_per_token is not None else pre.bytes_per_token
        return poly, size

    def encoder_for(self, mode: str, tensor_parallel_size: int | None = None) -> tuple[Poly, int]:
        """One item's encoder time and how many lanes encode at once, for vLLM's
        ``--mm-encoder-tp-mode`` (``weights``: the profile's encoder, one lane; ``data``: the
        lane's, one per GPU of the replica: ``tensor_parallel_size``, default the profile's)."""
        if tensor_parallel_size is not None and tensor_parallel_size < 1:
            raise ValueError(f"tensor_parallel_size must be at least 1, not {tensor_parallel_size}")
        if mode == "weights":
            return self.encoder, 1
        if mode == "data":
            lanes = self.tensor_parallel_size if tensor_parallel_size is None else tensor_parallel_size
            return self.encoder_lane or self.encoder, lanes
        raise ValueError(f"mm_encoder_tp_mode must be 'weights' or 'data', not {mode!r}")

    def num_gpu_blocks(self, block_size: int | None = None) -> int:
        """KV blocks for ``block_size`` (the profile's by default), counting vLLM's null block."""
        bs = block_size or self.engine.block_size
        return self.engine.kv_capacity_tokens() // bs


def _profile_dir() -> Path:
    return Path(str(resources.files("mmgate.sim").joinpath("profiles")))


def available_profiles() -> list[str]:
    """Names of the shipped profiles."""
    return sorted(p.stem for p in _profile_dir().glob("*.yaml"))


def load_profile(name_or_path: str | Path) -> Profile:
    """Load a shipped profile by name, or any profile YAML by path."""
    text = str(name_or_path)
    path = Path(text)
    if not (text.endswith((".yaml", ".yml")) or path.is_file()):
        path = _profile_dir() / f"{text}.yaml"
        if not path.is_file():
            shipped = available_profiles()
            hint = did_you_mean(text, shipped)
            raise ProfileError(f"unknown profile {text!r}{hint}; shipped profiles: {', '.join(shipped)}")
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise ProfileError(f"cannot read profile {path}: {exc}") from exc
    try:
        return msgspec.convert(data, Profile)
    except msgspec.ValidationError as exc:
        raise ProfileError(f"invalid profile {path}: {exc}") from exc


def fit_poly(points: Sequence[tuple[float, float]], degree: int = 2) -> tuple[float, ...]:
    """Least-squares polynomial ``c0 + c1*x (+ c2*x^2)`` through measured ``(x, ms)`` points.

    With as many points as coefficients the fit is exact. This is how the shipped profiles'
    encoder and preprocessing constants were fitted; see docs/sim.md for the step constants.
    """
    if degree not in (1, 2):
        raise ValueError("degree must be 1 or 2")
    k = degree + 1
    if len(points) < k:
        raise ValueError(f"need at least {k} points for degree {degree}")
    # Normal equations, solved by Gaussian elimination with partial pivoting (k <= 3).
    a = [[sum(x ** (i + j) for x, _ in points) for j in range(k)] for i in range(k)]
    b = [sum(y * x**i for x, y in points) for i in range(k)]
    for col in range(k):
        pivot = max(range(col, k), key=lambda r: abs(a[r][col]))
        if math.isclose(a[pivot][col], 0.0, abs_tol=1e-300):
            raise ValueError("points do not determine the polynomial (repeated x values?)")
        a[col], a[pivot] = a[pivot], a[col]
        b[col], b[pivot] = b[pivot], b[col]
        for r in range(col + 1, k):
            f = a[r][col] / a[col][col]
            for c in range(col, k):
                a[r][c] -= f * a[col][c]
            b[r] -= f * b[col]
    coef = [0.0] * k
    for r in range(k - 1, -1, -1):
        coef[r] = (b[r] - sum(a[r][c] * coef[c] for c in range(r + 1, k))) / a[r][r]
    return tuple(coef)


def family_of(profile: Profile) -> str | None:
    """The pricing family of a profile: :func:`family_for_model` of its name
    (``qwen3-vl-32b-h200-tp2`` → ``qwen3-vl``) or of its model, the longer match; pricing's
    default when neither matches."""
    matches = [f for f in (family_for_model(profile.name), family_for_model(profile.model)) if f]
    return max(matches, key=len) if matches else "qwen3-vl"
