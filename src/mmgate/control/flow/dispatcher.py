"""The flow dispatcher: holds requests while every endpoint they could go to is saturated, and
releases them, best first, the moment one is not.

Pure and synchronous: every call takes the time ``now`` from its caller (wall time behind HTTP,
virtual time in the discrete-event benchmark), and the only effects are the held requests'
``release``/``reject`` callbacks. The request controller owns one and calls:

- :meth:`submit` for a new request: released at once when nothing better is waiting and one of
  its endpoints has room; else held (within the bounds) or refused;
- :meth:`placed` / :meth:`prefilled` / :meth:`finished` as the controller sends requests, they
  produce a first token and they end: what the gateway has put on each endpoint, for the
  saturation detector;
- :meth:`refreshed` when an endpoint's metrics are scraped;
- :meth:`pump` after anything that may have freed room (a request finished, a scrape), and
  :meth:`expire` when the earliest TTL is due (:meth:`next_expiry`);
- :meth:`withdraw` when a held request's client hung up.

Release order: bands by priority, highest first; within a band the fairness policy picks the
flow; within the flow its order (FCFS or EDF). A request whose endpoints are all saturated is
skipped, not waited on: requests for other endpoints (another model, a subset) still go, so one
saturated model cannot block the rest of the fleet.

Bounds (requests and bytes; total, per band, per flow) are checked at :meth:`submit`. When a
non-sheddable request would exceed one, held sheddable requests (negative priority) are evicted
first, lowest priority and newest first; a sheddable request that does not fit is refused.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field

from mmgate.control.flow.classify import FlowKey
from mmgate.control.flow.policies import CostModel, FairnessPolicy
from mmgate.control.flow.queues import Band, BandLimits, ExpiryHeap, HeldRequest
from mmgate.control.flow.saturation import EndpointLoad, SaturationDetector
from mmgate.datalayer.metrics import MetricsSnapshot

# Why a request left flow control other than by dispatch (the reason its ``reject`` is given and
# the label of the rejection counter).
QUEUE_FULL = "queue_full"  # a request bound (total, band or flow): 429
BYTES_FULL = "bytes_full"  # a byte bound: 503 (the gateway's memory for held bodies)
SHED = "shed"  # a sheddable request with its endpoints saturated and no room held for it: 429
EVICTED = "evicted"  # a held sheddable request pushed out for a more important one: 429
TTL = "ttl"  # held for its whole TTL: 503
WITHDRAWN = "withdrawn"  # the client hung up (no answer is sent)

STATUS = {QUEUE_FULL: 429, BYTES_FULL: 503, SHED: 429, EVICTED: 429, TTL: 503}


@dataclass(slots=True)
class DispatcherLimits:
    max_requests: int = 0  # everything held at once (0: no bound)
    max_bytes: int = 0


@dataclass(slots=True)
class FlowStats:
    """Counters for metrics: dispatches and rejections per (band priority, reason), and the total
    time held per band (with the dispatch count, a mean)."""

    dispatched: dict[int, int] = field(default_factory=dict)
    held_dispatched: dict[int, int] = field(default_factory=dict)  # of them, after being held
    rejected: dict[tuple[int, str], int] = field(default_factory=dict)
    wait_s: dict[int, float] = field(default_factory=dict)


@dataclass(slots=True, frozen=True)
class BandPlan:
    """One priority's band: its limits, its ordering (EDF, else FCFS), the cost its fairness
    counts (``None``: it does not price requests) and how to make its fairness policy."""

    limits: BandLimits
    edf: bool
    edf_default_target_s: float
    cost: CostModel | None
    make_policy: Callable[[], FairnessPolicy]


MetricsOf = Callable[[str], MetricsSnapshot | None]
BandOf = Callable[[int], BandPlan]


class FlowDispatcher:
    def __init__(
        self,
        detector: SaturationDetector,
        metrics_of: MetricsOf,
        band_of: BandOf,
        limits: DispatcherLimits | None = None,
    ) -> None:
        """``metrics_of(endpoint)``: its latest scraped metrics (``None``: never scraped, or gone);
        ``band_of(priority)``: the plan of a priority's band, asked once per priority seen."""
        self.detector = detector
        self._metrics_of = metrics_of
        self._band_of = band_of
        self.limits = limits if limits is not None else DispatcherLimits()
        self.bands: dict[int, Band] = {}
        self._policies: dict[int, FairnessPolicy] = {}
        self._order: list[Band] = []  # by priority, highest first
        self.loads: dict[str, EndpointLoad] = {}
        self.count = 0
        self.bytes = 0
        self._seq = itertools.count(1)
        self._expiry = ExpiryHeap()
        self.stats = FlowStats()

    # -- requests ---------------------------------------------------------------------------------

    def submit(self, item: HeldRequest, now: float) -> None:
        """A new request: released at once (its ``release`` called before this returns), held,
        or refused (its ``reject`` called)."""
        band = self._band(item.key.priority)
        if not self.count and self._free(item, now, {}):
            self._dispatched(band, item, now, held=False)
            item.release()
            return
        holds = band.limits.hold
        if not holds and not self._free(item, now, {}):
            self._reject(band, item, SHED)
            return
        reason = self._make_room(band, item)
        if reason is not None:
            self._reject(band, item, reason)
            return
        item.seq = next(self._seq)
        ttl = band.limits.ttl_s
        item.expires = now + ttl if ttl > 0 else float("inf")
        item.queued = True
        queue = band.flows.get(item.key.fairness_id)
        if queue is None:
            self._policies[band.priority].backlogged(band, item.key.fairness_id)
            queue = band.flow(item.key.fairness_id)
        queue.push(item)
        band.count += 1
        band.bytes += item.size
        self.count += 1
        self.bytes += item.size
        self._expiry.push(item)
        self.pump(now)
        if item.queued and not holds:  # others took the room: a band that holds nothing sheds it
            self._unqueue(item)
            self._reject(band, item, SHED)

    def passed(self, key: FlowKey, cost: float) -> None:
        """A request went at once, nothing being held and its endpoints having room (the
        caller checked both: the fast path, without a held form): counted, and charged to its
        flow."""
        band = self._band(key.priority)
        p = band.priority
        self.stats.dispatched[p] = self.stats.dispatched.get(p, 0) + 1
        if cost:
            self._policies[p].served(band, key.fairness_id, cost)

    def withdraw(self, item: HeldRequest) -> bool:
        """The client gave up: ``item`` leaves its queue now (neither callback is called). False
        when it was not held (already released or refused)."""
        if not item.queued:
            return False
        self._unqueue(item)
        band = self.bands[item.key.priority]
        key = (band.priority, WITHDRAWN)
        self.stats.rejected[key] = self.stats.rejected.get(key, 0) + 1
        return True

    def pump(self, now: float) -> int:
        """Release every held request that can go now, best first; returns how many."""
        released = 0
        while self.count:
            saturated: dict[str, bool] = {}

            def can_go(item: HeldRequest, cache: dict[str, bool] = saturated) -> bool:
                return self._free(item, now, cache)

            item = None
            for band in self._order:
                if not band.count:
                    continue
                queue = self._policies[band.priority].pick(band, can_go)
                if queue is not None:
                    item = queue.head()
                    break
            if item is None:
                return released
            self._unqueue(item)
            self._dispatched(self.bands[item.key.priority], item, now, held=True)
            released += 1
            item.release()  # the controller decides and places it now: the loads change
        return released

    def expire(self, now: float) -> int:
        """Refuse every held request whose TTL has ended (503); returns how many."""
        due = self._expiry.due(now)
        for item in due:
            self._unqueue(item)
            self._reject(self.bands[item.key.priority], item, TTL)
        return len(due)

    def next_expiry(self) -> float | None:
        """When the earliest held request's TTL ends (``None``: nothing held with a TTL)."""
        return self._expiry.next_due()

    # -- endpoints --------------------------------------------------------------------------------

    def placed(self, endpoint: str, tokens: int) -> None:
        """A request was sent to ``endpoint`` (``tokens``: its priced prompt tokens)."""
        load = self.loads.get(endpoint)
        if load is None:
            load = self.loads[endpoint] = EndpointLoad()
        load.since_scrape += 1
        load.requests += 1
        load.tokens += tokens

    def prefilled(self, endpoint: str, tokens: int) -> None:
        """A request placed on ``endpoint`` produced its first token: its ``tokens`` are no
        longer waiting for prefill there (call :meth:`pump` next)."""
        load = self.loads.get(endpoint)
        if load is not None:
            load.tokens = max(0, load.tokens - tokens)

    def finished(self, endpoint: str, tokens: int) -> None:
        """A request placed on ``endpoint`` ended (``tokens``: those still counted, if it never
        reported a first token; call :meth:`pump` next)."""
        load = self.loads.get(endpoint)
        if load is not None:
            load.requests = max(0, load.requests - 1)
            load.tokens = max(0, load.tokens - tokens)

    def refreshed(self, endpoint: str) -> None:
        """``endpoint``'s metrics were scraped: they now include what was sent before."""
        load = self.loads.get(endpoint)
        if load is not None:
            load.since_scrape = 0

    def forget(self, endpoint: str) -> None:
        self.loads.pop(endpoint, None)

    def saturated(self, endpoint: str, now: float) -> bool:
        return self.detector.saturated(self._metrics_of(endpoint), self.loads.get(endpoint), now)

    def charge(self, priority: int, fairness_id: str, cost: float) -> None:
        """``fairness_id`` was served ``cost`` more (or less) than charged at dispatch: the output
        actually generated, once observed."""
        band = self.bands.get(priority)
        if band is not None and cost:
            self._policies[priority].observed(band, fairness_id, cost)

    # -- inside -----------------------------------------------------------------------------------

    def _band(self, priority: int) -> Band:
        band = self.bands.get(priority)
        if band is None:
            plan = self._band_of(priority)
            band = self.bands[priority] = Band(priority, plan.limits, plan.edf)
            self._policies[priority] = plan.make_policy()
            self._order = sorted(self.bands.values(), key=lambda b: -b.priority)
        return band

    def _free(self, item: HeldRequest, now: float, cache: dict[str, bool]) -> bool:
        """Whether one of ``item``'s endpoints is not saturated (``cache``: answers this pass)."""
        for name in item.candidates:
            full = cache.get(name)
            if full is None:
                full = cache[name] = self.saturated(name, now)
            if not full:
                return True
        return False

    def _make_room(self, band: Band, item: HeldRequest) -> str | None:
        """``None`` when ``item`` fits every bound (evicting held sheddable requests for a
        non-sheddable one), else why it does not."""
        while True:
            reason = self._over(band, item)
            if reason is None:
                return None
            if item.key.sheddable or not self._evict_one(band, item, reason):
                return reason

    def _over(self, band: Band, item: HeldRequest) -> str | None:
        lim, blim = self.limits, band.limits
        queue = band.flows.get(item.key.fairness_id)
        flow_count = queue.count if queue is not None else 0
        flow_bytes = queue.bytes if queue is not None else 0
        if (lim.max_requests and self.count + 1 > lim.max_requests) or (
            blim.max_requests and band.count + 1 > blim.max_requests
        ):
            return QUEUE_FULL
        if blim.max_requests_per_flow and flow_count + 1 > blim.max_requests_per_flow:
            return QUEUE_FULL
        size = item.size
        if (lim.max_bytes and self.bytes + size > lim.max_bytes) or (
            blim.max_bytes and band.bytes + size > blim.max_bytes
        ):
            return BYTES_FULL
        if blim.max_bytes_per_flow and flow_bytes + size > blim.max_bytes_per_flow:
            return BYTES_FULL
        return None

    def _evict_one(self, band: Band, item: HeldRequest, reason: str) -> bool:
        """Evict the newest held request of the lowest sheddable band that helps ``item`` fit:
        any when the global bound is the one exceeded, else only from ``item``'s own band (which
        is not sheddable: so none). False when there is none."""
        lim = self.limits
        global_full = (reason == QUEUE_FULL and lim.max_requests and self.count + 1 > lim.max_requests) or (
            reason == BYTES_FULL and lim.max_bytes and self.bytes + item.size > lim.max_bytes
        )
        if not global_full:
            return False
        for victim_band in reversed(self._order):
            if victim_band.priority >= 0:
                return False
            if not victim_band.count:
                continue
            newest: HeldRequest | None = None
            for queue in victim_band.flows.values():
                last = queue.newest()
                if last is not None and (newest is None or last.seq > newest.seq):
                    newest = last
            if newest is not None:
                self._unqueue(newest)
                self._reject(victim_band, newest, EVICTED)
                return True
        return False

    def _unqueue(self, item: HeldRequest) -> None:
        item.queued = False
        band = self.bands[item.key.priority]
        queue = band.flows[item.key.fairness_id]
        queue.forget(item)
        band.count -= 1
        band.bytes -= item.size
        self.count -= 1
        self.bytes -= item.size
        if not queue.count:
            del band.flows[item.key.fairness_id]

    def _dispatched(self, band: Band, item: HeldRequest, now: float, *, held: bool) -> None:
        p = band.priority
        stats = self.stats
        stats.dispatched[p] = stats.dispatched.get(p, 0) + 1
        if held:
            stats.held_dispatched[p] = stats.held_dispatched.get(p, 0) + 1
            stats.wait_s[p] = stats.wait_s.get(p, 0.0) + (now - item.arrived)
        self._policies[p].served(band, item.key.fairness_id, item.cost)

    def _reject(self, band: Band, item: HeldRequest, reason: str) -> None:
        key = (band.priority, reason)
        self.stats.rejected[key] = self.stats.rejected.get(key, 0) + 1
        item.reject(reason)
