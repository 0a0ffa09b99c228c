"""The vision/audio encoder as the scheduler sees it: which media items a prefill chunk reaches,
which of them the encoder cache already holds, and which must be encoded in this step within the
per-step encoder budget and the cache's room (vLLM's ``_try_schedule_encoder_inputs``), and how
long the step's encoding takes. An item costs its modality's encoder where the profile gives one
(an omni model's audio tower), the vision encoder otherwise.

With one lane (vLLM's default ``--mm-encoder-tp-mode weights``) the items of a step are encoded
one after another: the step's encoder time is their sum. With ``data`` mode each GPU of a tensor
parallel replica holds the whole encoder and the step's items are split over the GPUs, largest
first onto the least loaded (vLLM balances the split by patch count the same way), so the step
waits for the busiest GPU: the largest lane sum. What the lanes do not change: which items are
encoded in a step (the budget and the cache are the replica's), and the memory (the encoder's
weights are small against the KV cache; the profile's KV capacity is kept).
"""

from __future__ import annotations

from collections.abc import Mapping

from mmgate.sim.core.caches import EncoderCache
from mmgate.sim.core.request import RequestState
from mmgate.sim.core.types import SimRequest
from mmgate.sim.profiles import Poly


def lane_makespan(item_ms: list[float], lanes: int) -> float:
    """Milliseconds until the last of ``lanes`` GPUs is done with ``item_ms`` split over them,
    each item whole on one GPU, largest first onto the least loaded. One lane: the sum."""
    if lanes <= 1 or len(item_ms) <= 1:
        return sum(item_ms)
    if len(item_ms) <= lanes:
        return max(item_ms)
    loads = [0.0] * lanes
    for ms in sorted(item_ms, reverse=True):
        i = loads.index(min(loads))
        loads[i] += ms
    return max(loads)


class EncoderStage:
    """Encoder-cache bookkeeping per request, the encoder budget, and the cache's counters (in
    items: a request's item counts once, at the first chunk that reaches it). ``lanes``: GPUs
    that encode a step's items at once (``data`` mode), 1 by default. ``by_modality``: encoders
    that replace ``profile`` for items of their modality."""

    __slots__ = ("budget", "by_modality", "cache", "hits", "lanes", "profile", "queries", "whole_items")

    def __init__(
        self,
        profile: Poly,
        cache_tokens: int | None,
        default_tokens: int,
        budget: int,
        whole_items: bool,
        lanes: int = 1,
        by_modality: Mapping[str, Poly] | None = None,
    ) -> None:
        self.profile = profile
        self.by_modality = dict(by_modality or {})
        self.cache = EncoderCache(cache_tokens or default_tokens, cache_tokens != 0)
        self.budget = budget
        self.whole_items = whole_items
        self.lanes = lanes
        self.queries = 0
        self.hits = 0

    def register(self, request: SimRequest) -> tuple[list[str], list[float]]:
        """Cache keys and encoder milliseconds of the request's items; ValueError for items that
        overlap or lie outside the prompt. Grows the cache and the budget to the largest item, as
        vLLM sizes both to at least one item."""
        prev_end = 0
        n = len(request.token_ids)
        rid = request.request_id
        enc_keys: list[str] = []
        enc_ms: list[float] = []
        shared = self.cache.shared
        by_modality = self.by_modality
        for span in request.mm_items:
            if span.offset < prev_end or span.length < 1 or span.offset + span.length > n:
                raise ValueError(f"media item {span.identity!r} overlaps another or lies outside the prompt")
            prev_end = span.offset + span.length
            enc_keys.append(span.identity if shared else f"{rid}\x00{span.identity}")
            remote = span.identity in request.remote_encoded
            poly = self.profile
            if by_modality:
                poly = by_modality.get(getattr(span, "modality", "image"), poly)
            enc_ms.append(0.0 if remote else poly.ms(span.length))
            self.cache.ensure_capacity(span.length)
            self.budget = max(self.budget, span.length)
        return enc_keys, enc_ms

    def plan(self, r: RequestState, start: int, n: int, enc_budget: int) -> tuple[int, list[int], int]:
        """The encoder inputs the chunk ``[start, start + n)`` reaches: returns the chunk length
        (shortened to stop before an item that cannot be encoded now), the indexes of the items
        to encode in this step and their embeddings. Cached items gain a reference from ``r``."""
        plan: list[int] = []
        planned = 0
        enc = self.cache
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
                self.queries += 1
            if enc.has(key):
                if key not in r.enc_held:
                    enc.add_ref(key, r.id)
                    r.enc_held.add(key)
                if first:
                    self.hits += 1
                i += 1
                continue
            if any(r.enc_keys[j] == key for j in plan):
                i += 1
                continue
            if self.whole_items and start < off and end < off + length:
                n = off - start  # vLLM's disable_chunked_mm_input: no partial item in a chunk
                break
            if length > enc_budget - planned or not enc.can_allocate(length, planned):
                n = off - start if start < off else 0
                break
            plan.append(i)
            planned += length
            i += 1
        return n, plan, planned

    def allocate(self, r: RequestState, plan: list[int], lanes: list[float] | None = None) -> float:
        """Encode the planned items (they enter the cache held by ``r``); their milliseconds
        summed, each also appended to ``lanes`` when given (the step's items, for
        :meth:`step_ms` with several lanes)."""
        ms = 0.0
        enc = self.cache
        for j in plan:
            key = r.enc_keys[j]
            enc.allocate(key, r.items[j][1], r.id)
            r.enc_held.add(key)
            ms += r.enc_ms[j]
            if lanes is not None:
                lanes.append(r.enc_ms[j])
        return ms

    def step_ms(self, summed_ms: float, item_ms: list[float]) -> float:
        """The step's encoder milliseconds: the sum with one lane, else the busiest lane's."""
        return summed_ms if self.lanes == 1 else lane_makespan(item_ms, self.lanes)

    def release_consumed(self, r: RequestState) -> None:
        """Drop ``r``'s hold on items its computed tokens have passed (their outputs are consumed)."""
        items = r.items
        while r.mm_next < len(items) and items[r.mm_next][0] + items[r.mm_next][1] <= r.computed:
            key = r.enc_keys[r.mm_next]
            if key in r.enc_held:
                r.enc_held.discard(key)
                self.cache.release(key, r.id)
            r.mm_next += 1

    def release(self, r: RequestState) -> None:
        """Drop every hold of ``r`` (it left the running set or could not start)."""
        for key in r.enc_held:
            self.cache.release(key, r.id)
        r.enc_held.clear()
