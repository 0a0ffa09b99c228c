"""One engine step's scheduling, as vLLM's V1 scheduler does it (the queues, admission, chunked
prefill, preemption); the step's cost is the caller's (:mod:`mmgate.sim.core.timing`).

1. Running requests first. Decoding ones take one token each; a decoder whose next token starts
   a new KV block allocates it, and when no block is free the most recently admitted running
   request is preempted (its blocks freed, its progress recomputed later).
2. Running, partially prefilled requests take prefill chunks from the remaining token budget
   (``max_num_batched_tokens``; chunked prefill).
3. If nobody was preempted, waiting requests are admitted in order while budget,
   ``max_num_seqs`` and free blocks allow. A newly admitted request first looks up its block keys
   in the prefix cache (at most ``num_tokens - 1`` tokens can hit).
4. A prefill chunk that reaches a media item's placeholders needs the item's encoder output
   (:class:`~mmgate.sim.core.encoder.EncoderStage`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field

from mmgate.sim.core.decode import DecodeSet
from mmgate.sim.core.encoder import EncoderStage
from mmgate.sim.core.prefix import PrefixCache
from mmgate.sim.core.request import DONE, RUNNING, WAITING, RequestState
from mmgate.sim.core.types import FinishedRequest, StepOutput


@dataclass(slots=True)
class Batch:
    """What one step runs: prefill chunks ``(request, start, tokens)`` in scheduling order, the
    decoders finishing in it, and the encoder work it carries."""

    step: int
    chunks: list[tuple[RequestState, int, int]] = field(default_factory=list)
    finishing: list[tuple[RequestState, int]] = field(default_factory=list)
    encode_ms: float = 0.0  # the items' encoder milliseconds summed
    encode_items_ms: list[float] | None = None  # each item's, when the encoder has several lanes
    encoded: int = 0
    n_dec: int = 0


class Scheduler:
    """The request queues and the per-step decisions over the prefix cache and encoder stage."""

    __slots__ = (
        "admit_seq",
        "decode",
        "encoder",
        "generation_tokens",
        "max_num_batched_tokens",
        "max_num_seqs",
        "preemptions",
        "prefilling",
        "prefix",
        "prompt_tokens",
        "requests",
        "running",
        "step_no",
        "waiting",
    )

    def __init__(
        self,
        prefix: PrefixCache,
        encoder: EncoderStage,
        max_num_batched_tokens: int,
        max_num_seqs: int,
        track_max_context: bool,
    ) -> None:
        self.prefix = prefix
        self.encoder = encoder
        self.max_num_batched_tokens = max_num_batched_tokens
        self.max_num_seqs = max_num_seqs
        self.decode = DecodeSet(prefix.block_size, track_max_context)
        self.requests: dict[str, RequestState] = {}
        self.waiting: deque[RequestState] = deque()
        self.running: dict[str, RequestState] = {}
        self.prefilling: dict[str, RequestState] = {}
        self.step_no = 0
        self.admit_seq = 0
        self.preemptions = 0
        self.prompt_tokens = 0
        self.generation_tokens = 0

    def enqueue(self, r: RequestState) -> None:
        self.requests[r.id] = r
        self.waiting.append(r)

    def abort(self, request_id: str) -> bool:
        r = self.requests.pop(request_id, None)
        if r is None:
            return False
        if r.status == WAITING:
            self.waiting.remove(r)
        else:
            self._leave_running(r)
        r.status = DONE
        return True

    def schedule(self, out: StepOutput) -> Batch:
        """Decide the next step's batch (admissions and preemptions are booked in ``out``)."""
        s = self.step_no
        self.step_no = s + 1
        batch = Batch(s, encode_items_ms=[] if self.encoder.lanes > 1 else None)
        bs = self.prefix.block_size
        decode = self.decode

        # 1. Decoders whose next token opens a block (or that finish) this step.
        for r in decode.due(s):
            computed = s + r.decode_offset
            if computed % bs == 0 and not self._grow_decoder(r, computed, out):
                continue
            if s == r.finish_step:
                batch.finishing.append((r, r.epoch))
            else:
                decode.push(r, s + 1)

        budget = self.max_num_batched_tokens - len(decode.by_id)
        enc_budget = self.encoder.budget
        # 2. Running requests still prefilling (admission order), then 3. waiting ones.
        for r, from_waiting in self._prefill_candidates(out):
            if budget <= 0:
                break
            res = self._schedule_prefill(r, budget, enc_budget, from_waiting, out, batch.encode_items_ms)
            if res is None:
                if from_waiting:
                    break
                continue
            n, enc_tokens, ms, items = res
            budget -= n
            enc_budget -= enc_tokens
            batch.encode_ms += ms
            batch.encoded += items
            batch.chunks.append((r, r.computed, n))
        batch.n_dec = len(decode.by_id)
        return batch

    def complete(self, batch: Batch, out: StepOutput) -> None:
        """Book the batch at the step's end: tokens (decoders first, their set before prefills
        join it), finished requests."""
        ids = self.decode.ids()
        resumed: list[str] = []
        prefill_tokens = 0
        for r, _start, n in batch.chunks:
            prefill_tokens += n
            self._finish_chunk(r, n, batch.step, out, resumed)
        out.prefill_tokens = prefill_tokens
        out.next_tokens = ids + tuple(resumed) if resumed else ids
        self.generation_tokens += batch.n_dec
        for r, epoch in batch.finishing:
            if r.epoch == epoch and r.status == RUNNING:
                r.outputs = r.max_tokens
                self._finish(r, out)

    def _prefill_candidates(self, out: StepOutput) -> Iterator[tuple[RequestState, bool]]:
        """Running prefills in admission order; then, if this step preempted nobody, the head
        of the waiting queue for as long as the caller keeps admitting and seats remain."""
        for r in list(self.prefilling.values()):
            if r.id in self.prefilling:
                yield r, False
        if out.preempted:
            return
        while self.waiting and len(self.running) < self.max_num_seqs:
            yield self.waiting[0], True

    def _schedule_prefill(
        self,
        r: RequestState,
        budget: int,
        enc_budget: int,
        from_waiting: bool,
        out: StepOutput,
        item_ms: list[float] | None,
    ) -> tuple[int, int, float, int] | None:
        """Try to schedule a prefill chunk of ``r``.

        Returns (tokens, encoder tokens, encoder ms, items encoded), or None if nothing of it
        can run this step. Leaves ``r.computed`` at the chunk's start."""
        prefix = self.prefix
        bs = prefix.block_size
        pool = prefix.pool
        hits = prefix.lookup(r) if from_waiting and r.computed == 0 else []
        start = len(hits) * bs if from_waiting else r.computed
        local_hit = start
        if from_waiting and r.remote_kv and r.outputs == 0:
            # P/D decode side: the prompt's KV came from the prefill pod; only the last token runs.
            start = max(start, r.prompt_len - 1)
        total = r.total
        n, plan, planned = self.encoder.plan(r, start, min(total - start, budget), enc_budget)
        if n <= 0:
            if from_waiting:
                self.encoder.release(r)
            return None

        # KV blocks.
        need = -(-(start + n) // bs) - len(r.blocks) - len(hits)
        while need + pool.num_evictable(hits) > pool.num_free():
            if from_waiting:
                # Unlike vLLM, a request that cannot start keeps no encoder entry pinned: a
                # pinned entry could block whoever is preempted to the queue's front forever.
                self.encoder.release(r)
                return None
            victim = self.running[next(reversed(self.running))]
            self._preempt(victim, out)
            if victim is r:
                return None
        if from_waiting:
            self._admit(r, hits, start, local_hit, total, out)
        if need > 0:
            r.blocks.extend(pool.allocate(need))
        prefix.cache_computed(r, start + n)
        ms = self.encoder.allocate(r, plan, item_ms)
        return n, planned, ms, len(plan)

    def _admit(
        self, r: RequestState, hits: list[int], start: int, local_hit: int, total: int, out: StepOutput
    ) -> None:
        """Move the head of the waiting queue into the running set with its cached prefix."""
        self.waiting.popleft()
        if hits:
            self.prefix.pool.touch(hits)
            r.blocks = list(hits)
        r.computed = start
        r.n_cached_blocks = len(hits)
        self.prefix.count(total, local_hit)
        if r.cached_tokens < 0:  # first admission (a preempted request resumes silently)
            r.cached_tokens = start
            self.prompt_tokens += r.prompt_len
            out.scheduled.append(r.id)
        r.status = RUNNING
        self.admit_seq += 1
        r.admitted = self.admit_seq
        self.running[r.id] = r
        self.prefilling[r.id] = r

    def _finish_chunk(self, r: RequestState, n: int, s: int, out: StepOutput, resumed: list[str]) -> None:
        """Book a scheduled prefill chunk at the step's end: release consumed encoder outputs;
        sample a token if the prefill is complete."""
        if r.status != RUNNING:
            return
        r.computed += n
        self.encoder.release_consumed(r)
        if r.computed < r.total:
            return
        r.outputs += 1
        self.generation_tokens += 1
        if r.outputs == 1:
            out.first_token.append(r.id)
        else:
            resumed.append(r.id)
        if r.outputs >= r.max_tokens:
            self._finish(r, out)
            return
        del self.prefilling[r.id]
        self.decode.add(r, s)

    def _grow_decoder(self, r: RequestState, computed: int, out: StepOutput) -> bool:
        """Decoder ``r`` (``computed`` tokens in KV, a multiple of the block size) needs a new
        block: cache the block that just filled, allocate one (preempting if needed).
        Returns False if ``r`` itself was preempted."""
        self.prefix.cache_filled(r, computed // self.prefix.block_size)
        pool = self.prefix.pool
        while pool.num_free() < 1:
            victim = self.running[next(reversed(self.running))]
            self._preempt(victim, out)
            if victim is r:
                return False
        r.blocks.extend(pool.allocate(1))
        return True

    def _leave_running(self, r: RequestState) -> None:
        """Take ``r`` out of the running set and give back its blocks and encoder outputs."""
        del self.running[r.id]
        if self.prefilling.pop(r.id, None) is None:
            self.decode.remove(r)
        r.epoch += 1
        self.prefix.pool.release(r.blocks)
        r.blocks = []
        r.n_cached_blocks = 0
        self.encoder.release(r)

    def _preempt(self, r: RequestState, out: StepOutput) -> None:
        """vLLM's recompute preemption: free everything, keep generated tokens, requeue first."""
        if r.id in self.decode:
            # Tokens generated so far: computed = prompt + outputs - 1 before this step.
            r.outputs = self.step_no - 1 + r.decode_offset - r.prompt_len + 1
        self._leave_running(r)
        r.computed = 0
        r.mm_next = 0
        r.status = WAITING
        self.waiting.appendleft(r)
        self.preemptions += 1
        out.preempted.append(r.id)

    def _finish(self, r: RequestState, out: StepOutput) -> None:
        self._leave_running(r)
        r.status = DONE
        del self.requests[r.id]
        out.finished.append(FinishedRequest(r.id, r.prompt_len, max(r.cached_tokens, 0), r.outputs))
