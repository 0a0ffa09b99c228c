"""Held requests and the queues that hold them: one queue per flow, flows grouped in priority
bands, every level counted in requests and in bytes.

Bytes matter as much as requests: a held request keeps its whole body in memory, and a queue of
twenty 20 MB image bodies is 400 MB whatever its request count. Removal is lazy (a removed request
is marked and skipped when it reaches the front), so a client that hangs up leaves its queue in
O(1) and the counts drop at once.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass, field

from mmgate.control.flow.classify import FlowKey

Release = Callable[[], None]
Reject = Callable[[str], None]


class HeldRequest:
    """One request in flow control. ``candidates``: the endpoints it may go to (saturation is
    judged over them); ``cost``: what it will cost a pod (the fairness policy's unit); ``size``:
    bytes it holds. ``release`` and ``reject`` are the caller's: the dispatcher calls exactly one
    of them, once (``reject`` with the reason), unless the request is :meth:`withdrawn
    <mmgate.control.flow.dispatcher.FlowDispatcher.withdraw>` first."""

    __slots__ = (
        "arrived",
        "candidates",
        "cost",
        "deadline",
        "expires",
        "key",
        "queued",
        "reject",
        "release",
        "seq",
        "size",
    )

    def __init__(
        self,
        key: FlowKey,
        candidates: tuple[str, ...],
        *,
        arrived: float,
        size: int = 0,
        cost: float = 0.0,
        deadline: float = float("inf"),
        release: Release,
        reject: Reject,
    ) -> None:
        self.key = key
        self.candidates = candidates
        self.arrived = arrived
        self.size = size
        self.cost = cost
        self.deadline = deadline
        self.release = release
        self.reject = reject
        self.seq = 0  # arrival order, set when queued
        self.expires = float("inf")
        self.queued = False


class FlowQueue:
    """One flow's held requests in its band's order: FCFS (arrival) or EDF (deadline, then
    arrival). A heap keyed by the order; removed requests stay until they surface."""

    __slots__ = ("_heap", "bytes", "count", "edf", "fairness_id")

    def __init__(self, fairness_id: str, *, edf: bool) -> None:
        self.fairness_id = fairness_id
        self.edf = edf
        self._heap: list[tuple[float, int, HeldRequest]] = []
        self.count = 0
        self.bytes = 0

    def push(self, item: HeldRequest) -> None:
        order = item.deadline if self.edf else float(item.seq)
        heapq.heappush(self._heap, (order, item.seq, item))
        self.count += 1
        self.bytes += item.size

    def head(self) -> HeldRequest | None:
        heap = self._heap
        while heap and not heap[0][2].queued:
            heapq.heappop(heap)
        return heap[0][2] if heap else None

    def newest(self) -> HeldRequest | None:
        """The most recently queued live request (a scan: only eviction asks, rarely)."""
        live = [entry[2] for entry in self._heap if entry[2].queued]
        return max(live, key=lambda item: item.seq) if live else None

    def forget(self, item: HeldRequest) -> None:
        """``item`` left (withdrawn, expired, evicted): counted out now, dropped when it surfaces."""
        self.count -= 1
        self.bytes -= item.size


@dataclass(slots=True)
class BandLimits:
    max_requests: int = 0  # 0: no bound
    max_bytes: int = 0
    max_requests_per_flow: int = 0
    max_bytes_per_flow: int = 0
    ttl_s: float = 60.0  # 0: held until released or withdrawn
    hold: bool = True  # False: never held (a request whose endpoints are saturated is shed)


@dataclass(slots=True)
class Band:
    """The flows of one priority. ``flows`` holds only flows with requests held (an idle flow's
    queue is dropped, so client-chosen fairness ids cannot grow it without bound)."""

    priority: int
    limits: BandLimits
    edf: bool = False
    flows: dict[str, FlowQueue] = field(default_factory=dict)
    count: int = 0
    bytes: int = 0

    def flow(self, fairness_id: str) -> FlowQueue:
        queue = self.flows.get(fairness_id)
        if queue is None:
            queue = self.flows[fairness_id] = FlowQueue(fairness_id, edf=self.edf)
        return queue


class ExpiryHeap:
    """Held requests by the time their TTL ends (lazy: released ones are skipped)."""

    __slots__ = ("_heap",)

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, HeldRequest]] = []

    def push(self, item: HeldRequest) -> None:
        if item.expires != float("inf"):
            heapq.heappush(self._heap, (item.expires, item.seq, item))

    def due(self, now: float) -> list[HeldRequest]:
        out: list[HeldRequest] = []
        heap = self._heap
        while heap and (heap[0][0] <= now or not heap[0][2].queued):
            item = heapq.heappop(heap)[2]
            if item.queued:
                out.append(item)
        return out

    def next_due(self) -> float | None:
        heap = self._heap
        while heap and not heap[0][2].queued:
            heapq.heappop(heap)
        return heap[0][0] if heap else None
