"""The decoding requests of an engine, tracked so a step costs O(changes), not O(running).

A decoder gains one token per step, so its computed count is ``step + decode_offset`` and needs
no update; it needs attention only when its next token opens a KV block and at its last token.
Those steps sit in a heap keyed by step number. The step-time formula wants the sum of decoders'
context lengths (``n * step + sum of offsets``) and, for some profiles, the longest one (a lazy
max-heap of offsets).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator

from mmgate.sim.core.request import RUNNING, RequestState


class DecodeSet:
    """The decoders by id, their attention heap, and the context sums the step time needs."""

    __slots__ = ("_ids", "_max_heap", "_tiebreak", "block_size", "by_id", "heap", "offset_sum", "track_max")

    def __init__(self, block_size: int, track_max: bool) -> None:
        self.block_size = block_size
        self.track_max = track_max
        self.by_id: dict[str, RequestState] = {}
        self.heap: list[tuple[int, int, int, int, RequestState]] = []
        self.offset_sum = 0
        self._max_heap: list[tuple[int, int, int, RequestState]] = []
        self._tiebreak = 0
        self._ids: tuple[str, ...] | None = ()

    def __len__(self) -> int:
        return len(self.by_id)

    def __contains__(self, request_id: str) -> bool:
        return request_id in self.by_id

    def due(self, step: int) -> Iterator[RequestState]:
        """Decoders that need attention at ``step`` (popped; stale entries skipped). Entries
        pushed while iterating are for later steps."""
        heap = self.heap
        while heap and heap[0][0] <= step:
            _, _, _, epoch, r = heapq.heappop(heap)
            if r.epoch == epoch and r.status == RUNNING:
                yield r

    def push(self, r: RequestState, from_step: int) -> None:
        """Queue the next step (>= from_step) at which decoder ``r`` needs attention: its next
        block boundary or its last token."""
        computed = from_step + r.decode_offset
        boundary = from_step + (-computed) % self.block_size
        self._tiebreak += 1
        heapq.heappush(self.heap, (min(boundary, r.finish_step), r.admitted, self._tiebreak, r.epoch, r))

    def add(self, r: RequestState, step: int) -> None:
        """``r`` finished its prefill in ``step`` and decodes from the next step on
        (computed = step + 1 + offset there)."""
        self.by_id[r.id] = r
        self._ids = None
        r.decode_offset = r.computed - (step + 1)
        r.finish_step = step + 1 + (r.max_tokens - r.outputs) - 1
        self.offset_sum += r.decode_offset
        if self.track_max:
            self._tiebreak += 1
            heapq.heappush(self._max_heap, (-r.decode_offset, self._tiebreak, r.epoch, r))
        self.push(r, step + 1)

    def remove(self, r: RequestState) -> None:
        if self.by_id.pop(r.id, None) is not None:
            self.offset_sum -= r.decode_offset
            self._ids = None

    def ids(self) -> tuple[str, ...]:
        """The decoders' ids; the same tuple while the set is unchanged (free per step)."""
        ids = self._ids
        if ids is None:
            ids = self._ids = tuple(self.by_id)
        return ids

    def max_offset(self) -> int:
        heap = self._max_heap
        while heap:
            neg, _, epoch, r = heap[0]
            if r.epoch == epoch and r.status == RUNNING and r.id in self.by_id:
                return -neg
            heapq.heappop(heap)
        return 0
