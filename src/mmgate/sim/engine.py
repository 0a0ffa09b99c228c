"""A pure, clock-free, step-driven model of a vLLM V1 engine serving a multimodal model.

The caller owns time. ``preprocess(request, now)`` says how long the frontend takes before the
request can enter the scheduler; ``add_request(request, now)`` enqueues it; each
``step(now)`` schedules one batch like vLLM's V1 scheduler and returns how long it runs and
which requests got tokens. The HTTP simulator and the discrete-event benchmark drive the same
object, one with a real clock and one with a virtual one.

One step, as vLLM does it:

1. Running requests first. Decoding ones take one token each; a decoder whose next token
   starts a new KV block allocates it, and when no block is free the most recently admitted
   running request is preempted (its blocks freed, its progress recomputed later).
2. Running, partially prefilled requests take prefill chunks from the remaining token budget
   (``max_num_batched_tokens``; chunked prefill).
3. If nobody was preempted, waiting requests are admitted in order while budget,
   ``max_num_seqs`` and free blocks allow. A newly admitted request first looks up its block
   keys in the prefix cache (at most ``num_tokens - 1`` tokens can hit).
4. A prefill chunk that reaches a media item's placeholders needs the item's encoder output:
   an encoder-cache hit is free, a miss is encoded in this step (within the per-step encoder
   budget and cache room; otherwise the chunk stops just before the item).

Step time = encoder time of the items encoded + the LM forward (see
:class:`mmgate.sim.profiles.StepTiming`). A request whose prefill completes samples its first
token at the end of the step.

Cost: block keys are hashed once, at admission (decode blocks as they fill); a decoding
request costs nothing per step except at block boundaries and at its end (an event queue keyed
by step number), so a step is O(changes), not O(tokens) or O(running).
"""

from __future__ import annotations

import heapq
import random
from collections import deque
from collections.abc import Iterator
from pathlib import Path

from mmgate.sim.engine_caches import EncoderCache, ProcessorCache
from mmgate.sim.engine_kv import BlockPool
from mmgate.sim.engine_types import (
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    EngineConfig,
    EngineStats,
    FinishedRequest,
    KVEvent,
    MediaSpan,
    SimRequest,
    StepOutput,
)
from mmgate.sim.profiles import Profile, load_profile
from mmgate.vllm.blocks import BlockHash, BlockHasher, ExtraKeys, block_extra_keys, event_extra_keys

__all__ = [
    "AllBlocksCleared",
    "BlockRemoved",
    "BlockStored",
    "Engine",
    "EngineConfig",
    "EngineStats",
    "FinishedRequest",
    "KVEvent",
    "MediaSpan",
    "SimRequest",
    "StepOutput",
]

_WAITING, _RUNNING, _DONE = 0, 1, 2


class _Req:
    """Engine-side state of one request."""

    __slots__ = (
        "admitted",
        "blocks",
        "cached_tokens",
        "computed",
        "decode_offset",
        "enc_held",
        "enc_keys",
        "enc_ms",
        "epoch",
        "finish_step",
        "hashes",
        "id",
        "items",
        "items_end",
        "max_tokens",
        "mm_next",
        "mm_queried",
        "n_cached_blocks",
        "outputs",
        "prompt",
        "prompt_len",
        "remote_kv",
        "salt",
        "spans",
        "status",
    )

    def __init__(self, request: SimRequest, enc_keys: list[str], enc_ms: list[float]) -> None:
        self.id = request.request_id
        self.prompt = request.token_ids
        self.prompt_len = len(request.token_ids)
        self.spans = request.mm_items
        self.items = [(s.offset, s.length) for s in request.mm_items]
        self.items_end = self.items[-1][0] + self.items[-1][1] if self.items else 0
        self.enc_keys = enc_keys
        self.enc_ms = enc_ms
        self.max_tokens = request.max_tokens
        self.salt = request.cache_salt or None
        self.remote_kv = request.remote_prefill
        self.outputs = 0
        self.computed = 0
        self.blocks: list[int] = []
        self.hashes: list[BlockHash] = []
        self.n_cached_blocks = 0
        self.mm_next = 0
        self.mm_queried = 0
        self.enc_held: set[str] = set()
        self.cached_tokens = -1
        self.status = _WAITING
        self.admitted = 0
        self.epoch = 0
        self.decode_offset = 0
        self.finish_step = 0


class Engine:
    """One simulated vLLM engine (one pod). See the module docstring for the model."""

    def __init__(self, profile: Profile | str | Path, config: EngineConfig | None = None) -> None:
        self.profile = profile if isinstance(profile, Profile) else load_profile(profile)
        cfg = config or EngineConfig()
        d = self.profile.engine
        self.block_size = cfg.block_size or d.block_size
        self.num_gpu_blocks = cfg.num_gpu_blocks or self.profile.num_gpu_blocks(self.block_size)
        self.max_num_batched_tokens = cfg.max_num_batched_tokens or d.max_num_batched_tokens
        self.max_num_seqs = cfg.max_num_seqs or d.max_num_seqs
        self.max_model_len = cfg.max_model_len or d.max_model_len
        if self.max_num_batched_tokens < self.max_num_seqs:
            raise ValueError(
                f"max_num_batched_tokens ({self.max_num_batched_tokens}) must be >= "
                f"max_num_seqs ({self.max_num_seqs}), as vLLM requires"
            )
        self.config = cfg
        self.enable_prefix_caching = cfg.enable_prefix_caching
        self.hasher = BlockHasher(cfg.prefix_caching_hash_algo, self.block_size, cfg.hash_seed)
        self._pool = BlockPool(self.num_gpu_blocks, cfg.kv_events)
        enc_tokens = cfg.encoder_cache_tokens
        shared = enc_tokens != 0
        self._enc = EncoderCache(enc_tokens or self.max_num_batched_tokens, shared)
        self.encoder_budget = cfg.encoder_budget_tokens or self.max_num_batched_tokens
        self._whole_mm_items = cfg.disable_chunked_mm_input
        gb = cfg.mm_processor_cache_gb
        self._proc = ProcessorCache(int(gb * (1 << 30))) if gb > 0 else None
        self._pre_workers = [0.0] * max(1, cfg.preprocess_workers)
        noise = self.profile.noise.relative_sd if cfg.noise is None else cfg.noise
        self._noise = noise
        self._rng = random.Random(cfg.seed)
        self._out_id = cfg.output_token_id
        t = self.profile.step
        self._t = t

        self._requests: dict[str, _Req] = {}
        self._waiting: deque[_Req] = deque()
        self._running: dict[str, _Req] = {}
        self._prefilling: dict[str, _Req] = {}
        self._decoding: dict[str, _Req] = {}
        self._step_no = 0
        self._admit_seq = 0
        self._events: list[tuple[int, int, int, int, _Req]] = []
        self._tiebreak = 0
        self._offset_sum = 0
        self._max_heap: list[tuple[int, int, int, _Req]] = []
        self._track_max = t.decode_ms_per_max_context_token != 0.0
        self._decode_ids: tuple[str, ...] | None = ()

        self._prefix_queries = 0
        self._prefix_hits = 0
        self._enc_queries = 0
        self._enc_hits = 0
        self._proc_queries = 0
        self._proc_hits = 0
        self._preemptions = 0
        self._prompt_tokens = 0
        self._generation_tokens = 0

    # ------------------------------------------------------------------ public API

    def preprocess(self, request: SimRequest, now: float) -> float:
        """Seconds from ``now`` until ``request`` has been preprocessed and may be added.

        Looks every media item up in the processor cache (a hit skips its processing, a miss
        stores it) and queues the work on the frontend's preprocessing worker(s), so a burst
        of arrivals waits in line as on a real API server."""
        pre = self.profile.preprocess
        ms = pre.per_request_ms
        proc = self._proc
        for item in request.mm_items:
            if proc is not None:
                self._proc_queries += 1
                if proc.lookup(item.identity, item.length * pre.bytes_per_token):
                    self._proc_hits += 1
                    continue
            ms += pre.ms(item.length)
        seconds = self._jitter(ms) / 1000.0
        workers = self._pre_workers
        i = min(range(len(workers)), key=workers.__getitem__)
        done = max(now, workers[i]) + seconds
        workers[i] = done
        return done - now

    def add_request(self, request: SimRequest, now: float) -> None:
        """Enqueue a (preprocessed) request. Raises ValueError for a malformed request or one
        that could never fit this engine (then nothing is enqueued)."""
        rid = request.request_id
        if rid in self._requests:
            raise ValueError(f"request {rid!r} is already in the engine")
        if request.max_tokens < 1:
            raise ValueError("max_tokens must be at least 1")
        n = len(request.token_ids)
        if n < 1:
            raise ValueError("a request needs at least one prompt token")
        total = n + request.max_tokens
        if total > self.max_model_len:
            raise ValueError(f"prompt + max_tokens = {total} exceeds max_model_len {self.max_model_len}")
        need = -(-total // self.block_size)
        if need > self.num_gpu_blocks - 1:
            raise ValueError(f"request needs {need} KV blocks; the engine has {self.num_gpu_blocks - 1}")
        prev_end = 0
        enc_keys: list[str] = []
        enc_ms: list[float] = []
        shared = self._enc.shared
        for span in request.mm_items:
            if span.offset < prev_end or span.length < 1 or span.offset + span.length > n:
                raise ValueError(f"media item {span.identity!r} overlaps another or lies outside the prompt")
            prev_end = span.offset + span.length
            enc_keys.append(span.identity if shared else f"{rid}\x00{span.identity}")
            remote = span.identity in request.remote_encoded
            enc_ms.append(0.0 if remote else self.profile.encoder.ms(span.length))
            self._enc.ensure_capacity(span.length)
            self.encoder_budget = max(self.encoder_budget, span.length)
        r = _Req(request, enc_keys, enc_ms)
        if self.enable_prefix_caching:
            r.hashes = self.hasher.block_hashes(request.token_ids, request.mm_items, r.salt)
        self._requests[rid] = r
        self._waiting.append(r)

    def abort(self, request_id: str) -> bool:
        """Drop a request wherever it is (client gone). False if the engine does not know it."""
        r = self._requests.pop(request_id, None)
        if r is None:
            return False
        if r.status == _WAITING:
            self._waiting.remove(r)
        else:
            self._leave_running(r)
        r.status = _DONE
        return True

    def has_work(self) -> bool:
        return bool(self._waiting or self._running)

    def num_requests(self) -> int:
        return len(self._requests)

    def reset_prefix_cache(self) -> bool:
        """Forget every cached block (vLLM's ``/reset_prefix_cache``); only when none is in use."""
        return self._pool.reset()

    def is_cached(self, block_hash: BlockHash) -> bool:
        return block_hash in self._pool.block_of

    def stats(self) -> EngineStats:
        return EngineStats(
            num_running=len(self._running),
            num_waiting=len(self._waiting),
            kv_cache_usage=self._pool.usage(),
            prefix_cache_queries=self._prefix_queries,
            prefix_cache_hits=self._prefix_hits,
            encoder_cache_queries=self._enc_queries,
            encoder_cache_hits=self._enc_hits,
            processor_cache_queries=self._proc_queries,
            processor_cache_hits=self._proc_hits,
            num_gpu_blocks=self.num_gpu_blocks,
            block_size=self.block_size,
            num_preemptions=self._preemptions,
            encoder_cache_used_tokens=self._enc.used(),
            encoder_cache_capacity_tokens=self._enc.capacity,
            prompt_tokens=self._prompt_tokens,
            generation_tokens=self._generation_tokens,
        )

    def step(self, now: float) -> StepOutput:
        """Schedule and run one batch starting at ``now``; see the module docstring."""
        s = self._step_no
        self._step_no = s + 1
        out = StepOutput()
        bs = self.block_size

        # 1. Decoders whose next token opens a block (or that finish) this step.
        finishing: list[tuple[_Req, int]] = []
        events = self._events
        while events and events[0][0] <= s:
            _, _, _, epoch, r = heapq.heappop(events)
            if r.epoch != epoch or r.status != _RUNNING:
                continue
            computed = s + r.decode_offset
            if computed % bs == 0 and not self._grow_decoder(r, computed, out):
                continue
            if s == r.finish_step:
                finishing.append((r, r.epoch))
            else:
                self._push_decode_event(r, s + 1)

        budget = self.max_num_batched_tokens - len(self._decoding)
        enc_budget = self.encoder_budget
        scheduled: list[tuple[_Req, int]] = []
        encode_ms = 0.0
        prefill_ms = 0.0
        encoded = 0
        t = self._t

        # 2. Running requests still prefilling (admission order), then 3. waiting ones.
        for r, from_waiting in self._prefill_candidates(out):
            if budget <= 0:
                break
            res = self._schedule_prefill(r, budget, enc_budget, from_waiting, out)
            if res is None:
                if from_waiting:
                    break
                continue
            n, enc_tokens, ms, items = res
            budget -= n
            enc_budget -= enc_tokens
            encode_ms += ms
            encoded += items
            prefill_ms += n * (t.prefill_ms_per_token + t.prefill_attention_ms * (r.computed + n / 2))
            scheduled.append((r, n))

        n_dec = len(self._decoding)
        if not scheduled and n_dec == 0:
            out.events = self._pool.take_events()
            return out

        # Step duration.
        lm_ms = t.base_ms + prefill_ms
        if scheduled:
            lm_ms += t.prefill_fixed_ms
        if n_dec:
            ctx_sum = n_dec * (s + 1) + self._offset_sum
            lm_ms += t.decode_ms_per_seq * n_dec + t.decode_ms_per_context_token * ctx_sum
            if self._track_max:
                lm_ms += t.decode_ms_per_max_context_token * (s + 1 + self._max_offset())
        total_ms = encode_ms + lm_ms
        if self._noise:
            f = self._noise_factor()
            total_ms *= f
            encode_ms *= f
        out.duration = total_ms / 1000.0
        out.encoder_seconds = encode_ms / 1000.0
        out.encoded_items = encoded
        out.decode_seqs = n_dec

        # Tokens of this step: decoders first (their set before prefills join it).
        ids = self._decode_ids
        if ids is None:
            ids = self._decode_ids = tuple(self._decoding)
        resumed: list[str] = []
        prefill_tokens = 0
        for r, n in scheduled:
            prefill_tokens += n
            self._finish_chunk(r, n, s, out, resumed)
        out.prefill_tokens = prefill_tokens
        out.next_tokens = ids + tuple(resumed) if resumed else ids
        self._generation_tokens += n_dec
        for r, epoch in finishing:
            if r.epoch == epoch and r.status == _RUNNING:
                r.outputs = r.max_tokens
                self._finish(r, out)
        out.events = self._pool.take_events()
        return out

    # ------------------------------------------------------------------ scheduling

    def _prefill_candidates(self, out: StepOutput) -> Iterator[tuple[_Req, bool]]:
        """Running prefills in admission order; then, if this step preempted nobody, the head
        of the waiting queue for as long as the caller keeps admitting and seats remain."""
        for r in list(self._prefilling.values()):
            if r.id in self._prefilling:
                yield r, False
        if out.preempted:
            return
        while self._waiting and len(self._running) < self.max_num_seqs:
            yield self._waiting[0], True

    def _schedule_prefill(
        self,
        r: _Req,
        budget: int,
        enc_budget: int,
        from_waiting: bool,
        out: StepOutput,
    ) -> tuple[int, int, float, int] | None:
        """Try to schedule a prefill chunk of ``r``.

        Returns (tokens, encoder tokens, encoder ms, items encoded), or None if nothing of it
        can run this step. Leaves ``r.computed`` at the chunk's start."""
        bs = self.block_size
        pool = self._pool
        hits: list[int] = []
        if from_waiting and r.computed == 0 and self.enable_prefix_caching:
            total = r.prompt_len + r.outputs
            self._hash_upto(r, total // bs)
            hits = pool.lookup(r.hashes, (total - 1) // bs)
        start = len(hits) * bs if from_waiting else r.computed
        local_hit = start
        if from_waiting and r.remote_kv and r.outputs == 0:
            # P/D decode side: the prompt's KV came from the prefill pod; only the last token runs.
            start = max(start, r.prompt_len - 1)
        total = r.prompt_len + r.outputs
        n = min(total - start, budget)

        # Encoder inputs the chunk reaches.
        plan: list[int] = []
        planned = 0
        enc = self._enc
        items = r.items
        i = r.mm_next
        end = start + n
        while i < len(items):
            off, length = items[i]
            if off >= end:
                break
            if off + length <= start:
                i += 1
                continue
            key = r.enc_keys[i]
            first = i >= r.mm_queried
            if first:
                r.mm_queried = i + 1
                self._enc_queries += 1
            if enc.has(key):
                if key not in r.enc_held:
                    enc.add_ref(key, r.id)
                    r.enc_held.add(key)
                if first:
                    self._enc_hits += 1
                i += 1
                continue
            if any(r.enc_keys[j] == key for j in plan):
                i += 1
                continue
            if self._whole_mm_items and start < off and end < off + length:
                n = off - start  # vLLM's disable_chunked_mm_input: no partial item in a chunk
                break
            if length > enc_budget - planned or not enc.can_allocate(length, planned):
                n = off - start if start < off else 0
                break
            plan.append(i)
            planned += length
            i += 1
        if n <= 0:
            if from_waiting:
                self._release_encoder_refs(r)
            return None

        # KV blocks.
        need = -(-(start + n) // bs) - len(r.blocks) - len(hits)
        while need + pool.num_evictable(hits) > pool.num_free():
            if from_waiting:
                # Unlike vLLM, a request that cannot start keeps no encoder entry pinned: a
                # pinned entry could block whoever is preempted to the queue's front forever.
                self._release_encoder_refs(r)
                return None
            victim = self._running[next(reversed(self._running))]
            self._preempt(victim, out)
            if victim is r:
                return None
        if from_waiting:
            self._waiting.popleft()
            if hits:
                pool.touch(hits)
                r.blocks = list(hits)
            r.computed = start
            r.n_cached_blocks = len(hits)
            if self.enable_prefix_caching:
                self._prefix_queries += total
                self._prefix_hits += local_hit
            if r.cached_tokens < 0:  # first admission (a preempted request resumes silently)
                r.cached_tokens = start
                self._prompt_tokens += r.prompt_len
                out.scheduled.append(r.id)
            r.status = _RUNNING
            self._admit_seq += 1
            r.admitted = self._admit_seq
            self._running[r.id] = r
            self._prefilling[r.id] = r
        if need > 0:
            r.blocks.extend(pool.allocate(need))
        if self.enable_prefix_caching:
            self._cache_full_blocks(r, min((start + n) // bs, len(r.hashes)))
        ms = 0.0
        for j in plan:
            key = r.enc_keys[j]
            enc.allocate(key, items[j][1], r.id)
            r.enc_held.add(key)
            ms += r.enc_ms[j]
        return n, planned, ms, len(plan)

    def _finish_chunk(self, r: _Req, n: int, s: int, out: StepOutput, resumed: list[str]) -> None:
        """Book a scheduled prefill chunk at the step's end: release consumed encoder outputs;
        sample a token if the prefill is complete."""
        if r.status != _RUNNING:
            return
        r.computed += n
        items = r.items
        while r.mm_next < len(items) and items[r.mm_next][0] + items[r.mm_next][1] <= r.computed:
            key = r.enc_keys[r.mm_next]
            if key in r.enc_held:
                r.enc_held.discard(key)
                self._enc.release(key, r.id)
            r.mm_next += 1
        if r.computed < r.prompt_len + r.outputs:
            return
        r.outputs += 1
        self._generation_tokens += 1
        if r.outputs == 1:
            out.first_token.append(r.id)
        else:
            resumed.append(r.id)
        if r.outputs >= r.max_tokens:
            self._finish(r, out)
            return
        # Becomes a decoder from the next step on: computed = s + 1 + offset there.
        del self._prefilling[r.id]
        self._decoding[r.id] = r
        self._decode_ids = None
        r.decode_offset = r.computed - (s + 1)
        r.finish_step = s + 1 + (r.max_tokens - r.outputs) - 1
        self._offset_sum += r.decode_offset
        if self._track_max:
            self._tiebreak += 1
            heapq.heappush(self._max_heap, (-r.decode_offset, self._tiebreak, r.epoch, r))
        self._push_decode_event(r, s + 1)

    def _push_decode_event(self, r: _Req, from_step: int) -> None:
        """Queue the next step (>= from_step) at which decoder ``r`` needs attention: its next
        block boundary or its last token."""
        bs = self.block_size
        computed = from_step + r.decode_offset
        boundary = from_step + (-computed) % bs
        self._tiebreak += 1
        heapq.heappush(self._events, (min(boundary, r.finish_step), r.admitted, self._tiebreak, r.epoch, r))

    def _grow_decoder(self, r: _Req, computed: int, out: StepOutput) -> bool:
        """Decoder ``r`` (``computed`` tokens in KV, a multiple of the block size) needs a new
        block: cache the block that just filled, allocate one (preempting if needed).
        Returns False if ``r`` itself was preempted."""
        bs = self.block_size
        if self.enable_prefix_caching:
            full = computed // bs
            self._hash_upto(r, full)
            self._cache_full_blocks(r, full)
        pool = self._pool
        while pool.num_free() < 1:
            victim = self._running[next(reversed(self._running))]
            self._preempt(victim, out)
            if victim is r:
                return False
        r.blocks.extend(pool.allocate(1))
        return True

    # ------------------------------------------------------------------ blocks and keys

    def _block_tokens(self, r: _Req, i: int) -> tuple[int, ...]:
        bs = self.block_size
        start = i * bs
        end = start + bs
        p = r.prompt_len
        if end <= p:
            return tuple(r.prompt[start:end])
        if start >= p:
            return (self._out_id,) * bs
        return tuple(r.prompt[start:p]) + (self._out_id,) * (end - p)

    def _hash_upto(self, r: _Req, n_blocks: int) -> None:
        """Extend ``r.hashes`` to ``n_blocks`` keys (blocks holding generated tokens)."""
        while len(r.hashes) < n_blocks:
            i = len(r.hashes)
            parent = r.hashes[-1] if r.hashes else None
            r.hashes.append(self.hasher.hash_block(parent, self._block_tokens(r, i), self._extra_keys(r, i)))

    def _extra_keys(self, r: _Req, i: int) -> ExtraKeys:
        bs = self.block_size
        if (i > 0 or not r.salt) and (not r.items or i * bs >= r.items_end):
            return None
        return block_extra_keys(i * bs, (i + 1) * bs, r.spans, r.salt)[0]

    def _cache_full_blocks(self, r: _Req, n_full: int) -> None:
        first = r.n_cached_blocks
        if n_full <= first:
            return
        pool = self._pool
        block_of = pool.block_of
        hash_of = pool.hash_of
        blocks = r.blocks
        hashes = r.hashes
        for i in range(first, n_full):
            h = hashes[i]
            b = blocks[i]
            if h not in block_of and hash_of[b] is None:
                block_of[h] = b
                hash_of[b] = h
        r.n_cached_blocks = n_full
        if pool.events is None:
            return
        bs = self.block_size
        token_ids: list[int] = []
        extras: list[list[object] | None] = []
        for i in range(first, n_full):
            token_ids.extend(self._block_tokens(r, i))
            extras.append(event_extra_keys(self._extra_keys(r, i)))
        parent = r.hashes[first - 1] if first > 0 else None
        pool.events.append(BlockStored(r.hashes[first:n_full], parent, token_ids, bs, extras))

    # ------------------------------------------------------------------ leaving

    def _leave_running(self, r: _Req) -> None:
        """Take ``r`` out of the running set and give back its blocks and encoder outputs."""
        del self._running[r.id]
        if self._prefilling.pop(r.id, None) is None and self._decoding.pop(r.id, None) is not None:
            self._offset_sum -= r.decode_offset
            self._decode_ids = None
        r.epoch += 1
        self._pool.release(r.blocks)
        r.blocks = []
        r.n_cached_blocks = 0
        self._release_encoder_refs(r)

    def _release_encoder_refs(self, r: _Req) -> None:
        for key in r.enc_held:
            self._enc.release(key, r.id)
        r.enc_held.clear()

    def _preempt(self, r: _Req, out: StepOutput) -> None:
        """vLLM's recompute preemption: free everything, keep generated tokens, requeue first."""
        if r.id in self._decoding:
            # Tokens generated so far: computed = prompt + outputs - 1 before this step.
            r.outputs = self._step_no - 1 + r.decode_offset - r.prompt_len + 1
        self._leave_running(r)
        r.computed = 0
        r.mm_next = 0
        r.status = _WAITING
        self._waiting.appendleft(r)
        self._preemptions += 1
        out.preempted.append(r.id)

    def _finish(self, r: _Req, out: StepOutput) -> None:
        self._leave_running(r)
        r.status = _DONE
        del self._requests[r.id]
        out.finished.append(FinishedRequest(r.id, r.prompt_len, max(r.cached_tokens, 0), r.outputs))

    # ------------------------------------------------------------------ helpers

    def _max_offset(self) -> int:
        heap = self._max_heap
        while heap:
            neg, _, epoch, r = heap[0]
            if r.epoch == epoch and r.status == _RUNNING and r.id in self._decoding:
                return -neg
            heapq.heappop(heap)
        return 0

    def _noise_factor(self) -> float:
        return max(0.0, 1.0 + self._rng.gauss(0.0, self._noise))

    def _jitter(self, ms: float) -> float:
        return ms * self._noise_factor() if self._noise else ms
