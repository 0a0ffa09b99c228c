"""The engine loop: requests in, one step at a time, tokens out (vLLM's ``LLMEngine`` shape).

``add_request`` reads the images (processor cache first), renders the chat and lays out the
prompt, so a bad request fails there with a :class:`~mmgate.errors.RequestError`. Each ``step``
then prefills the waiting requests that fit (one at a time: their lengths differ) and runs one
decode step for every request already running, batched into one forward pass with left padding.

Prefill is where the caches pay off:

1. the prompt's full blocks are keyed as vLLM keys them (:class:`mmgate.vllm.blocks.BlockHasher`:
   chained hashes whose extra keys carry each image's identity and offset, and the cache salt), and
   the keys and values of the longest run of cached blocks are reused. At least the last prompt
   token is always computed: its logits choose the first reply token;
2. an image is needed only if its placeholder run reaches past the reused prefix; its features
   come from the encoder cache, from the encode-only engine that ``ec_transfer_params`` names, or
   from the vision tower, in that order;
3. the language model runs over the remaining tokens only, at their own rope positions.

Every block the sequence fills (prompt and reply) is stored in the prefix cache, and each store and
eviction is queued as a KV event in the simulator's own types (``drain_kv_events``), so the server
publishes them with the simulator's publisher and the gateway's precise index reads real blocks.

All of it runs under ``torch.inference_mode`` (no autograd graph, no saved activations). The
engine is not thread-safe: one thread owns it and makes every call.
"""

from __future__ import annotations

import dataclasses
import io
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from PIL import Image, UnidentifiedImageError

from mmgate.errors import RequestError
from mmgate.modelserver.events import BlockRemoved, BlockStored, KVEvent
from mmgate.modelserver.stats import EngineStats
from mmgate.refengine.caches import LruCache
from mmgate.refengine.prompt import ChatPrompt, ImageInput
from mmgate.refengine.vlm import KV, Layout, ProcessedImage, VisionLanguageModel
from mmgate.vllm.blocks import BlockHash, BlockHasher, event_extra_keys, extra_keys_by_block

__all__ = ["Engine", "EngineConfig", "FeatureFetcher", "GenerateRequest", "StageSeconds", "StepOutput"]

FeatureFetcher = Callable[[str, Mapping[str, Any]], torch.Tensor | None]
"""Gets an image's features from an encode-only engine: ``(identity, its ec_transfer_params entry)``
to the features, or None when they cannot be had (the engine then encodes the image itself)."""

_MiB = 1 << 20


@dataclass(frozen=True, slots=True)
class EngineConfig:
    """The engine's knobs, named after the vLLM flags they mirror."""

    enable_prefix_caching: bool = True  # --enable-prefix-caching
    block_size: int = 16  # --block-size
    prefix_cache_blocks: int = 4096  # KV blocks the prefix cache keeps (vLLM: num_gpu_blocks)
    encoder_cache_tokens: int = 16384  # embeddings the encoder cache keeps; 0 = off
    processor_cache_bytes: int = 256 * _MiB  # --mm-processor-cache-gb, in bytes; 0 = off
    prefix_caching_hash_algo: str = "sha256"  # --prefix-caching-hash-algo
    hash_seed: str | None = None  # NONE_HASH seed; None = vLLM's choice ($PYTHONHASHSEED or fixed)
    max_num_seqs: int = 8  # --max-num-seqs: requests decoded together
    max_model_len: int = 8192  # --max-model-len: prompt + reply


@dataclass(frozen=True, slots=True)
class GenerateRequest:
    """One chat completion to run. Decoding is greedy."""

    request_id: str
    prompt: ChatPrompt
    max_tokens: int = 16
    ignore_eos: bool = False
    cache_salt: str | None = None
    ec_transfer_params: Mapping[str, Mapping[str, Any]] | None = None


@dataclass(frozen=True, slots=True)
class StepOutput:
    """What a step produced for one request: its new token, the text it adds (held back while a
    multi-byte character is incomplete) and, when ``finished``, why. ``logits`` chose the token."""

    request_id: str
    token_id: int
    text: str
    finished: bool
    finish_reason: str | None
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int
    logits: torch.Tensor


@dataclass(slots=True)
class StageSeconds:
    """Cumulative wall seconds per stage and the work done in them (``mmgate bench`` reads these)."""

    processor: float = 0.0
    encoder: float = 0.0
    prefill: float = 0.0
    decode: float = 0.0
    processed_items: int = 0
    encoded_items: int = 0
    fetched_items: int = 0
    prefill_tokens: int = 0
    decode_tokens: int = 0
    decode_steps: int = 0


@dataclass(slots=True)
class _Counters:
    prefix_queries: int = 0
    prefix_hits: int = 0
    encoder_queries: int = 0
    encoder_hits: int = 0
    processor_queries: int = 0
    processor_hits: int = 0
    prompt_tokens: int = 0
    generation_tokens: int = 0


@dataclass(slots=True)
class _Sequence:
    request: GenerateRequest
    layout: Layout
    images: dict[str, ProcessedImage]
    token_ids: list[int] = field(default_factory=list)
    kv: KV = field(default_factory=list)
    cached_tokens: int = 0
    stored_blocks: int = 0
    prefix_offset: int = 0  # reply tokens [prefix_offset, read_offset) were sent, decoded together
    read_offset: int = 0

    @property
    def completion_tokens(self) -> int:
        return len(self.token_ids) - len(self.layout.token_ids)


class Engine:
    """A model with its caches and the requests it is running."""

    def __init__(
        self,
        model: VisionLanguageModel,
        config: EngineConfig | None = None,
        *,
        fetch_features: FeatureFetcher | None = None,
    ) -> None:
        self.model = model
        self.config = config or EngineConfig()
        cfg = self.config
        self.hasher = BlockHasher(cfg.prefix_caching_hash_algo, cfg.block_size, cfg.hash_seed)
        self._processor_cache: LruCache[str, ProcessedImage] = LruCache(
            cfg.processor_cache_bytes, lambda p: p.nbytes
        )
        self._encoder_cache: LruCache[str, torch.Tensor] = LruCache(
            cfg.encoder_cache_tokens, lambda f: f.shape[0]
        )
        self._prefix_cache: LruCache[BlockHash, KV] = LruCache(
            cfg.prefix_cache_blocks if cfg.enable_prefix_caching else 0, lambda _: 1
        )
        self._fetch = fetch_features
        self._waiting: deque[_Sequence] = deque()
        self._running: list[_Sequence] = []
        self._events: list[KVEvent] = []
        self._counters = _Counters()
        self._stages = StageSeconds()

    # -- requests ------------------------------------------------------------------------------

    def add_request(self, request: GenerateRequest) -> None:
        """Queue a request after reading its images and laying out its prompt (RequestError for a
        client mistake: an unreadable image, text that spells the image placeholder, a prompt longer
        than ``max_model_len``)."""
        if request.max_tokens < 1:
            raise RequestError("'max_tokens' must be at least 1.", param="max_tokens")
        with torch.inference_mode():
            images = {img.identity: self.processed(img) for img in request.prompt.images}
            text = self.model.render(request.prompt.messages)
            try:
                layout = self.model.layout(
                    text, [(img.identity, images[img.identity]) for img in request.prompt.images]
                )
            except ValueError as exc:  # the text itself spells the model's image placeholder
                raise RequestError(f"The prompt cannot be laid out: {exc}.", param="messages") from None
        if len(layout.token_ids) + 1 > self.config.max_model_len:
            raise RequestError(
                f"The prompt is {len(layout.token_ids)} tokens; this engine's max_model_len is "
                f"{self.config.max_model_len}.",
                param="messages",
            )
        self._waiting.append(_Sequence(request, layout, images, list(layout.token_ids)))

    def abort(self, request_id: str) -> None:
        """Forget a request (its client went away); blocks it stored stay cached."""
        self._waiting = deque(s for s in self._waiting if s.request.request_id != request_id)
        self._running = [s for s in self._running if s.request.request_id != request_id]

    def has_unfinished(self) -> bool:
        return bool(self._waiting or self._running)

    def step(self) -> list[StepOutput]:
        """Prefill what fits, then one decode step for the requests that were already running."""
        decoding = list(self._running)
        outputs: list[StepOutput] = []
        with torch.inference_mode():
            while self._waiting and len(self._running) < self.config.max_num_seqs:
                seq = self._waiting.popleft()
                logits = self._prefill(seq)
                outputs.append(self._append(seq, logits))
            if decoding:
                t0 = time.perf_counter()
                batch_logits = self._decode(decoding)
                self._stages.decode += time.perf_counter() - t0
                self._stages.decode_steps += 1
                self._stages.decode_tokens += len(decoding)
                outputs.extend(
                    self._append(seq, row) for seq, row in zip(decoding, batch_logits, strict=True)
                )
        return outputs

    def generate(self, request: GenerateRequest) -> list[StepOutput]:
        """Run one request to the end alone (tests, benchmarks, the encode-only leg)."""
        self.add_request(request)
        out: list[StepOutput] = []
        while self.has_unfinished():
            out.extend(o for o in self.step() if o.request_id == request.request_id)
        return out

    def encode(self, prompt: ChatPrompt) -> dict[str, torch.Tensor]:
        """The features of every image of ``prompt`` by identity (the encode-only role): processor
        and encoder caches as for a prefill, no language model."""
        with torch.inference_mode():
            images = {img.identity: self.processed(img) for img in prompt.images}
            return {identity: self._features(identity, image, None) for identity, image in images.items()}

    def drain_kv_events(self) -> list[KVEvent]:
        """The KV events since the last call, oldest first."""
        events, self._events = self._events, []
        return events

    @property
    def stages(self) -> StageSeconds:
        """A copy of the per-stage totals so far."""
        return dataclasses.replace(self._stages)

    @property
    def stats(self) -> EngineStats:
        """A snapshot in the simulator's shape, so ``/metrics`` renders it with the same code."""
        c = self._counters
        blocks = max(self._prefix_cache.capacity, 1)
        return EngineStats(
            num_running=len(self._running),
            num_waiting=len(self._waiting),
            kv_cache_usage=self._prefix_cache.used / blocks,
            prefix_cache_queries=c.prefix_queries,
            prefix_cache_hits=c.prefix_hits,
            encoder_cache_queries=c.encoder_queries,
            encoder_cache_hits=c.encoder_hits,
            processor_cache_queries=c.processor_queries,
            processor_cache_hits=c.processor_hits,
            num_gpu_blocks=self._prefix_cache.capacity,
            block_size=self.config.block_size,
            num_preemptions=0,
            encoder_cache_used_tokens=self._encoder_cache.used,
            encoder_cache_capacity_tokens=self._encoder_cache.capacity,
            prompt_tokens=c.prompt_tokens,
            generation_tokens=c.generation_tokens,
        )

    # -- media ---------------------------------------------------------------------------------

    def processed(self, image: ImageInput) -> ProcessedImage:
        """The image's processor output, from the processor cache when it holds the identity."""
        cache = self._processor_cache
        if cache.enabled:
            self._counters.processor_queries += 1
            hit = cache.get(image.identity)
            if hit is not None:
                self._counters.processor_hits += 1
                return hit
        t0 = time.perf_counter()
        try:
            with Image.open(io.BytesIO(image.data)) as pil:
                pil.load()
                processed = self.model.preprocess(pil)
        except (UnidentifiedImageError, Image.DecompressionBombError, OSError, ValueError) as exc:
            raise RequestError(
                f"Cannot read the image at '{image.param}': {exc}", param=image.param
            ) from None
        self._stages.processor += time.perf_counter() - t0
        self._stages.processed_items += 1
        if cache.enabled:
            cache.put(image.identity, processed)
        return processed

    def _features(
        self, identity: str, image: ProcessedImage, remote: Mapping[str, Mapping[str, Any]] | None
    ) -> torch.Tensor:
        cache = self._encoder_cache
        if cache.enabled:
            self._counters.encoder_queries += 1
            hit = cache.get(identity)
            if hit is not None:
                self._counters.encoder_hits += 1
                return hit
        features = None
        if remote is not None and identity in remote and self._fetch is not None:
            features = self._fetch(identity, remote[identity])
            if features is not None and tuple(features.shape) != (image.num_tokens, self.model.hidden_size):
                features = None  # not this image's: encode it here rather than answer wrongly
            self._stages.fetched_items += features is not None
        if features is None:
            t0 = time.perf_counter()
            features = self.model.encode(image)
            self._stages.encoder += time.perf_counter() - t0
            self._stages.encoded_items += 1
        if cache.enabled:
            cache.put(identity, features)
        return features

    # -- prefill and decode --------------------------------------------------------------------

    def _prefill(self, seq: _Sequence) -> torch.Tensor:
        layout = seq.layout
        request = seq.request
        ids = layout.token_ids
        n = len(ids)
        bs = self.config.block_size
        hashes = (
            self.hasher.block_hashes(ids, layout.spans, request.cache_salt)
            if self._prefix_cache.enabled
            else []
        )
        reused, past = self._lookup(hashes[: (n - 1) // bs])
        start = reused * bs
        if self._prefix_cache.enabled:
            self._counters.prefix_queries += n
            self._counters.prefix_hits += start
        self._counters.prompt_tokens += n
        pieces: list[torch.Tensor] = []
        image_token = self.model.image_token_id
        for span in layout.spans:
            if span.offset + span.length <= start:
                continue  # wholly inside the reused prefix: its features are in the KV already
            rows = self._features(span.identity, seq.images[span.identity], request.ec_transfer_params)
            skip = sum(1 for t in ids[span.offset : start] if t == image_token)  # rows already in the KV
            pieces.append(rows[skip:])
        t0 = time.perf_counter()
        embeds = self.model.embed(ids[start:], pieces)
        logits, seq.kv = self.model.forward(embeds[None], layout.positions[:, None, start:], past, None)
        self._stages.prefill += time.perf_counter() - t0
        self._stages.prefill_tokens += n - start
        seq.cached_tokens = start
        seq.stored_blocks = reused
        self._store_blocks(seq)
        self._running.append(seq)
        return logits[0]

    def _lookup(self, hashes: Sequence[BlockHash]) -> tuple[int, KV | None]:
        """How many leading blocks are cached, and their keys and values joined per layer."""
        blocks: list[KV] = []
        for h in hashes:
            block = self._prefix_cache.get(h)
            if block is None:
                break
            blocks.append(block)
        if not blocks:
            return 0, None
        layers = len(blocks[0])
        past = [
            (torch.cat([b[i][0] for b in blocks], dim=2), torch.cat([b[i][1] for b in blocks], dim=2))
            for i in range(layers)
        ]
        return len(blocks), past

    def _decode(self, seqs: Sequence[_Sequence]) -> torch.Tensor:
        """One token for each sequence in one forward pass: caches left-padded to the longest, the
        padding masked out, each token at its own position."""
        model = self.model
        embeds = torch.stack([model.embed(seq.token_ids[-1:], []) for seq in seqs])
        axes = seqs[0].layout.positions.shape[0]
        positions = torch.tensor([len(s.token_ids) - 1 + s.layout.position_delta for s in seqs]).view(
            1, -1, 1
        )
        positions = positions.expand(axes, -1, -1)
        if len(seqs) == 1:
            logits, seqs[0].kv = model.forward(embeds, positions, seqs[0].kv, None)
            return logits
        lengths = [s.kv[0][0].shape[2] for s in seqs]
        longest = max(lengths)
        mask = torch.zeros(len(seqs), longest + 1, dtype=torch.long)
        for i, length in enumerate(lengths):
            mask[i, longest - length :] = 1
        past = [
            (
                _left_pad([s.kv[layer][0] for s in seqs], longest),
                _left_pad([s.kv[layer][1] for s in seqs], longest),
            )
            for layer in range(len(seqs[0].kv))
        ]
        logits, kv = model.forward(embeds, positions, past, mask)
        for i, (seq, length) in enumerate(zip(seqs, lengths, strict=True)):
            pad = longest - length
            seq.kv = [(k[i : i + 1, :, pad:], v[i : i + 1, :, pad:]) for k, v in kv]
        return logits

    def _append(self, seq: _Sequence, logits: torch.Tensor) -> StepOutput:
        token = int(torch.argmax(logits).item())
        seq.token_ids.append(token)
        self._counters.generation_tokens += 1
        request = seq.request
        reason = None
        if token in self.model.eos_token_ids and not request.ignore_eos:
            reason = "stop"
        elif seq.completion_tokens >= request.max_tokens or len(seq.token_ids) >= self.config.max_model_len:
            reason = "length"
        delta = self._text_delta(seq, finished=reason is not None)
        if reason is not None:
            self._store_blocks(seq)
            self._running.remove(seq)
        return StepOutput(
            request.request_id,
            token,
            delta,
            reason is not None,
            reason,
            len(seq.layout.token_ids),
            seq.completion_tokens,
            seq.cached_tokens,
            logits,
        )

    def _text_delta(self, seq: _Sequence, finished: bool) -> str:
        """The reply text the newest token adds, decoding a short window rather than the whole reply
        each step (vLLM's incremental detokenizer): the window starts a few tokens back, so a word's
        leading space and a character split over tokens decode as they do in the full reply, and the
        text is held back while it ends in an incomplete character."""
        reply = seq.token_ids[len(seq.layout.token_ids) :]
        detokenize = self.model.detokenize
        sent = detokenize(reply[seq.prefix_offset : seq.read_offset])
        text = detokenize(reply[seq.prefix_offset :])
        if not finished and (len(text) <= len(sent) or text.endswith("\ufffd")):
            return ""
        seq.prefix_offset, seq.read_offset = seq.read_offset, len(reply)
        return text[len(sent) :]

    # -- prefix cache --------------------------------------------------------------------------

    def _store_blocks(self, seq: _Sequence) -> None:
        """Cache every full block whose keys and values the sequence has computed; each run of
        blocks new to the cache is one ``BlockStored`` event, each eviction a ``BlockRemoved``."""
        cache = self._prefix_cache
        if not cache.enabled:
            return
        bs = self.config.block_size
        full = seq.kv[0][0].shape[2] // bs
        first = seq.stored_blocks
        if full <= first:
            return
        request = seq.request
        ids = seq.token_ids[: full * bs]
        hashes = self.hasher.block_hashes(ids, seq.layout.spans, request.cache_salt)
        fmt = self.hasher.key_format
        extras, default = extra_keys_by_block(bs, seq.layout.spans, request.cache_salt, fmt=fmt)
        removed: list[BlockHash] = []
        run: list[int] = []  # consecutive blocks new to the cache: one BlockStored each run
        for b in range(first, full + 1):
            if b < full and hashes[b] not in cache:
                kv = [
                    (k[:, :, b * bs : (b + 1) * bs].clone(), v[:, :, b * bs : (b + 1) * bs].clone())
                    for k, v in seq.kv
                ]
                removed.extend(cache.put(hashes[b], kv))
                run.append(b)
                continue
            if b < full:
                cache.get(hashes[b])  # another request stored it meanwhile: now most recently used
            if run:
                lo, hi = run[0], run[-1] + 1
                self._events.append(
                    BlockStored(
                        list(hashes[lo:hi]),
                        hashes[lo - 1] if lo > 0 else None,
                        list(ids[lo * bs : hi * bs]),
                        bs,
                        [event_extra_keys(extras.get(i, default), fmt) for i in range(lo, hi)],
                    )
                )
                run = []
        seq.stored_blocks = full
        self._events.extend(BlockRemoved([h]) for h in removed)


def _left_pad(tensors: Sequence[torch.Tensor], length: int) -> torch.Tensor:
    """``(1, heads, n_i, dim)`` tensors zero-padded on the left to ``length`` and stacked."""
    padded = [
        t
        if t.shape[2] == length
        else torch.cat([t.new_zeros(*t.shape[:2], length - t.shape[2], t.shape[3]), t], 2)
        for t in tensors
    ]
    return torch.cat(padded, dim=0)
