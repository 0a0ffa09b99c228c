"""The data the simulated engine takes and gives: requests, configuration and step outputs.
Plain values, so a server, a discrete-event loop and tests can all use them without knowing the
engine's internals. What any model server reports the same way (KV events, the stats snapshot)
is the model-server contract: :mod:`mmgate.modelserver.events`, :mod:`mmgate.modelserver.stats`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from mmgate.modelserver.events import KVEvent
from mmgate.vllm.blocks import LoRA, MediaSpanLike

__all__ = [
    "EngineConfig",
    "FinishedRequest",
    "MediaPayload",
    "MediaSpan",
    "SimRequest",
    "StepOutput",
    "TokenSequenceLike",
]


@dataclass(frozen=True, slots=True)
class MediaSpan:
    """One media item in a token sequence: its identity (content hash or client uuid) and its
    run of ``length`` placeholder tokens at ``offset``. ``length`` is also the item's encoder
    output size (embeddings), which the encoder cache counts."""

    identity: str
    offset: int
    length: int
    modality: str = "image"


@dataclass(frozen=True, slots=True)
class MediaPayload:
    """What the API server receives for one media item, for its front-end cost
    (:class:`mmgate.sim.profiles.MediaLoad`): the base64 text to decode (0 when the bytes did not
    come inline), the file's size, and its pixels and format when it is an image. ``url`` marks
    media the server would fetch; ``hashed`` whether its content is hashed (no uuid on the part)."""

    modality: str = "image"
    base64_bytes: int = 0
    file_bytes: int = 0
    pixels: int = 0
    fmt: str = ""
    url: bool = False
    hashed: bool = True  # False when the part carries a uuid: vLLM takes it as the hash, hashes nothing


class TokenSequenceLike(Protocol):
    """``mmgate.tokens.sequence.TokenSequence`` or anything shaped like it."""

    @property
    def token_ids(self) -> Sequence[int]: ...
    @property
    def mm_items(self) -> Sequence[MediaSpanLike]: ...


@dataclass(slots=True)
class SimRequest:
    """A request as the engine sees it. ``mm_items`` must be sorted by offset, must not overlap
    and must lie inside ``token_ids``. The engine always generates ``max_tokens`` tokens (as with
    ``ignore_eos``); output token ids are synthetic (``EngineConfig.output_token_id``)."""

    request_id: str
    token_ids: Sequence[int]
    mm_items: Sequence[MediaSpanLike] = ()
    max_tokens: int = 16
    cache_salt: str | None = None
    # Disaggregation (the server's roles): the prompt's KV arrives from a prefill pod, so only its
    # last token is computed here (vLLM's NixlConnector decode side); and media items whose encoder
    # output arrives from an encode pod (``ec_transfer_params``) cost no encoder time.
    remote_prefill: bool = False
    remote_encoded: frozenset[str] = frozenset()
    # The payload of each media part as the API server receives it (front-end cost); may be
    # empty (nothing to load: media already decoded, or a caller that does not model it).
    media: Sequence[MediaPayload] = ()
    lora: LoRA | None = None  # the request's adapter: part of every block's key, as in vLLM

    @classmethod
    def from_sequence(
        cls,
        request_id: str,
        sequence: TokenSequenceLike,
        max_tokens: int,
        cache_salt: str | None = None,
        media: Sequence[MediaPayload] = (),
    ) -> SimRequest:
        return cls(request_id, sequence.token_ids, sequence.mm_items, max_tokens, cache_salt, media=media)


@dataclass(frozen=True, slots=True)
class EngineConfig:
    """vLLM flags the engine mirrors. ``None`` means: the profile's value (or vLLM's default).

    - ``encoder_cache_tokens``: encoder-cache capacity in embeddings; None = vLLM's default
      (max_num_batched_tokens, at least the largest item); 0 = no reuse across requests.
    - ``encoder_budget_tokens``: encoder compute budget per step (vLLM: max_num_batched_tokens).
    - ``disable_chunked_mm_input``: vLLM's flag; a prefill chunk never ends inside an item whose
      start it newly reaches (the chunk stops before the item instead).
    - ``mm_processor_cache_gb``: processor cache size; 0 disables it (vLLM default 4).
    - ``prefix_caching_hash_algo`` / ``hash_seed``: see :mod:`mmgate.vllm.blocks`; seed None follows
      vLLM (``$PYTHONHASHSEED``, else a fixed seed for sha256, a random one for xxhash).
    - ``block_key_format``: which vLLM generation's extra keys to hash and publish
      (:class:`mmgate.vllm.blocks.KeyFormat`: ``tagged``, ``identifier``, ``offset``).
    - ``kv_events``: produce KV events in step outputs (costs a little time per cached block).
    - ``noise``: relative sd of Gaussian noise on durations (None = the profile's), ``seed``
      seeds it.
    - ``preprocess_workers``: how many requests the front end's multimodal processor (content
      hash, HF processor) works on at once (vLLM runs it on one single-thread executor).
    - ``media_loading_threads``: the front end's media-loading threads (payload and frame decode),
      vLLM's ``VLLM_MEDIA_LOADING_THREAD_COUNT`` (8).
    - ``mm_encoder_tp_mode``: vLLM's ``--mm-encoder-tp-mode``. ``weights`` (default): the
      profile's encoder, items one after another. ``data``: each GPU of the replica (the
      profile's ``tensor_parallel_size``) holds the whole encoder and encodes its share of a
      step's items; the step's encoder time is the busiest GPU's (:func:`lane_makespan`).
    - ``tensor_parallel_size``: GPUs of the replica (None = the profile's); only data mode reads
      it (the step timing is the profile's, so give the profile of a replica that size).
    """

    num_gpu_blocks: int | None = None
    block_size: int | None = None
    max_num_batched_tokens: int | None = None
    max_num_seqs: int | None = None
    max_model_len: int | None = None
    enable_prefix_caching: bool = True
    prefix_caching_hash_algo: str = "sha256"
    hash_seed: str | None = None
    block_key_format: str = "tagged"
    encoder_cache_tokens: int | None = None
    encoder_budget_tokens: int | None = None
    disable_chunked_mm_input: bool = False
    mm_processor_cache_gb: float = 4.0
    preprocess_workers: int = 1
    media_loading_threads: int = 8
    mm_encoder_tp_mode: str = "weights"
    tensor_parallel_size: int | None = None
    kv_events: bool = False
    noise: float | None = None
    seed: int = 0
    output_token_id: int = 0


@dataclass(frozen=True, slots=True)
class FinishedRequest:
    """A request that emitted its last token in this step (``usage`` for the response)."""

    request_id: str
    prompt_tokens: int
    cached_tokens: int
    output_tokens: int
    finish_reason: str = "length"


@dataclass(slots=True)
class StepOutput:
    """What one step did. Tokens are emitted at ``now + duration`` (the step's end).

    ``first_token``: requests whose first token this step produced. ``next_tokens``: requests
    that got one more (non-first) token; the same tuple object is returned while the set of
    decoding requests is unchanged, so it costs nothing per step. ``finished`` ⊆ those two.
    ``encoder_seconds`` is the part of ``duration`` spent in the vision encoder (it runs first).
    ``scheduled``: requests admitted from the waiting queue for the first time this step (vLLM's
    first ``SCHEDULED`` event, which ends the queue time; a preempted request resuming is not
    listed). An idle step (nothing schedulable) has ``duration == 0``.
    """

    duration: float = 0.0
    encoder_seconds: float = 0.0
    prefill_tokens: int = 0
    decode_seqs: int = 0
    encoded_items: int = 0
    scheduled: list[str] = field(default_factory=list)
    first_token: list[str] = field(default_factory=list)
    next_tokens: Sequence[str] = ()
    finished: list[FinishedRequest] = field(default_factory=list)
    preempted: list[str] = field(default_factory=list)
    events: list[KVEvent] = field(default_factory=list)
