"""What one simulated pod is, and a fleet of them: CLI flags and fleet YAML decode into these.

A fleet file lists pods (or groups of identical pods with ``count``) over shared ``defaults``::

    defaults:
      profile: qwen3-vl-32b-h200-tp2
      kv_events: {enable_kv_cache_events: true, endpoint: "tcp://*:5557", replay_endpoint: "tcp://*:5657"}
    pods:
      - {name: encoder, role: encode, count: 2}
      - {name: pd, count: 6, engine: {encoder_cache_tokens: 0}}

Ports are ``base_port`` + the pod's index unless a pod sets ``port``; 0 means "any free port".
KV-event endpoints of pods sharing one config are offset like vLLM's data-parallel ranks.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import yaml

from mmgate.sim.core.types import EngineConfig
from mmgate.sim.faults import FaultSettings
from mmgate.sim.profiles import Profile
from mmgate.sim.roles import Role
from mmgate.tokens.exact.files import ModelFilesError, load_model_files
from mmgate.vllm.kv_events_config import KVEventsConfig
from mmgate.vllm.kvevents import WireFormat


class PodSpec(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """Everything one simulated pod needs; every field has a usable default."""

    name: str = "pod-0"
    host: str = "127.0.0.1"
    port: int = 0
    profile: str = "fast"
    model: str | None = None  # served model name; the profile's model when unset
    family: str | None = None  # pricing family for media tokens; the profile's when unset
    # A local model folder (tokenizer.json + chat template): engine-exact token ids, as the gateway's
    # engine mode computes them, instead of the pseudo-token stream (mmgate.tokens.exact).
    tokenizer: str | None = None
    role: Role = Role.BOTH
    time_scale: float = 1.0  # wall seconds per simulated second (0.5 = twice as fast)
    seed: int = 0
    natural_output_tokens: int = 256  # answer length when the client sets no max_tokens/ignore_eos
    # P/D: time to pull one token's KV on the decode side; E/PD: to receive one visual token's
    # encoder output. None: the profile's ``transfer`` over ``transfer_path``, else the defaults.
    kv_transfer_s_per_token: float | None = None
    ec_transfer_s_per_token: float | None = None
    transfer_path: str = "network"  # shared-memory (one host) | network (between hosts)
    kv_events: KVEventsConfig | None = None
    kv_events_format: WireFormat = WireFormat.CURRENT
    kv_events_int_hashes: bool = True  # VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES
    faults: FaultSettings = msgspec.field(default_factory=FaultSettings)
    engine: dict[str, Any] = msgspec.field(default_factory=dict)  # engine/profile overrides
    # LoRA (vLLM's --lora-modules and --max-loras): adapter name -> path, served beside the base
    # model; at most max_loras resident at once, loading one that is not costs lora_load_s.
    lora_modules: dict[str, str] = msgspec.field(default_factory=dict)
    max_loras: int = 1
    lora_load_s: float = 0.05

    def validate(self) -> None:
        if self.time_scale <= 0:
            raise ValueError(f"pod {self.name}: time_scale must be > 0")
        if not 0 <= self.port < 65536:
            raise ValueError(f"pod {self.name}: port {self.port} out of range")
        if self.natural_output_tokens < 1:
            raise ValueError(f"pod {self.name}: natural_output_tokens must be >= 1")
        for what in ("kv_transfer_s_per_token", "ec_transfer_s_per_token"):
            value = getattr(self, what)
            if value is not None and value < 0:
                raise ValueError(f"pod {self.name}: {what} must be >= 0")
        if self.transfer_path not in TRANSFER_PATHS:
            raise ValueError(f"pod {self.name}: transfer_path must be one of {', '.join(TRANSFER_PATHS)}")
        self.faults.validate()
        if self.max_loras < 1:
            raise ValueError(f"pod {self.name}: max_loras must be >= 1")
        if self.lora_load_s < 0:
            raise ValueError(f"pod {self.name}: lora_load_s must be >= 0")
        for adapter in self.lora_modules:
            if not adapter or "," in adapter or adapter == self.model:
                raise ValueError(
                    f"pod {self.name}: LoRA adapter name {adapter!r} must be non-empty, without commas,"
                    " and differ from the base model's"
                )
        if self.tokenizer:
            try:
                load_model_files(self.tokenizer)
            except ModelFilesError as exc:
                raise ValueError(f"pod {self.name}: tokenizer: {exc}") from None


TRANSFER_PATHS = ("shared-memory", "network")
DEFAULT_KV_TRANSFER_S = 2e-5
"""Per token of KV, for a profile without ``transfer`` (an estimate: 20 µs, a few hundred KiB per
token of a large model over a fast network)."""
DEFAULT_EC_TRANSFER_S = 5e-7
"""Per visual token of encoder output, for a profile without ``transfer`` (an estimate: 8 KiB per
token of an 8B model's hidden size in bf16 over about 16 GB/s)."""


def transfer_times(spec: PodSpec, profile: Profile) -> tuple[float, float]:
    """(KV, encoder output) seconds per token for ``spec``'s pod: its own settings, else its
    profile's ``transfer`` over its ``transfer_path``, else the defaults."""
    kv, ec = DEFAULT_KV_TRANSFER_S, DEFAULT_EC_TRANSFER_S
    if profile.transfer is not None:
        ec, kv = profile.transfer.seconds_per_token(spec.transfer_path)
    if spec.kv_transfer_s_per_token is not None:
        kv = spec.kv_transfer_s_per_token
    if spec.ec_transfer_s_per_token is not None:
        ec = spec.ec_transfer_s_per_token
    return kv, ec


class FleetFile(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    base_port: int = 0
    defaults: dict[str, Any] = msgspec.field(default_factory=dict)
    pods: list[dict[str, Any]] = msgspec.field(default_factory=list)


def expand(
    base: dict[str, Any], groups: list[dict[str, Any]], *, base_port: int = 0, pods: int | None = None
) -> list[PodSpec]:
    """Pod specs from shared settings and groups; ``pods`` N identical pods when no groups are given."""
    if not groups:
        groups = [{"count": pods or 1}]
    specs: list[PodSpec] = []
    index = 0
    for gi, group in enumerate(groups):
        group = dict(group)
        count = group.pop("count", 1)
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise ValueError(f"pods[{gi}].count must be a positive integer")
        prefix = group.pop("name", None) or base.get("name") or "pod"
        for i in range(count):
            fields = {**base, **group}
            fields["name"] = f"{prefix}-{i}" if count > 1 or not group else prefix
            if "port" not in group:
                fields["port"] = base_port + index if base_port else 0
            elif count > 1 and fields["port"]:
                fields["port"] = int(fields["port"]) + i
            try:
                spec = msgspec.convert(fields, PodSpec, strict=False)
            except msgspec.ValidationError as exc:
                raise ValueError(f"pods[{gi}]: {exc}") from None
            spec.validate()
            specs.append(spec)
            index += 1
    names = [s.name for s in specs]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ValueError(f"pod names must be unique; repeated: {', '.join(dupes)}")
    return specs


def load_fleet(path: str | Path, overrides: dict[str, Any] | None = None) -> list[PodSpec]:
    """Read a fleet YAML; ``overrides`` (from CLI flags) apply over its ``defaults``."""
    text = Path(path).read_text()
    try:
        raw = yaml.safe_load(text) or {}
        doc = msgspec.convert(raw, FleetFile)
    except (yaml.YAMLError, msgspec.ValidationError) as exc:
        raise ValueError(f"{path}: {exc}") from None
    base = {**doc.defaults, **(overrides or {})}
    return expand(base, doc.pods, base_port=doc.base_port)


def engine_config(spec: PodSpec) -> EngineConfig:
    """The engine flags of a pod: its ``engine`` overrides, plus KV events and the seed."""
    fields = {f for f in EngineConfig.__dataclass_fields__}
    unknown = sorted(set(spec.engine) - fields)
    if unknown:
        known = ", ".join(sorted(fields))
        raise ValueError(f"pod {spec.name}: unknown engine setting(s) {', '.join(unknown)}; known: {known}")
    settings = dict(spec.engine)
    settings.setdefault("seed", spec.seed)
    settings["kv_events"] = spec.kv_events is not None and spec.kv_events.active
    try:
        return EngineConfig(**settings)
    except TypeError as exc:
        raise ValueError(f"pod {spec.name}: {exc}") from None
