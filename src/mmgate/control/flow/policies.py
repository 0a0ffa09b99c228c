"""Who goes next within a priority band: fairness across flows, and what a request costs.

Three fairness policies, each over the band's flows whose head request can go now:

- ``global-strict-fairness-policy`` (llm-d's default): the oldest request of the band, whatever
  its flow — one global FCFS order, no isolation between tenants.
- ``round-robin-fairness-policy`` (llm-d): flows take turns, one request each. Fair in requests,
  which is the wrong unit when one request is 40 tokens and another eight 1280x720 images.
- ``media-cost-fairness-policy`` (mmgate): virtual cost counters (VTC, Sheng et al., "Fairness in
  Serving Large Language Models", OSDI 2024). Each flow's counter grows by the cost of what it
  was served; the backlogged flow with the smallest counter goes next. A flow that becomes
  backlogged is lifted to the smallest counter among the backlogged (else the last served one's),
  so idling banks no credit. Cost is media-aware (:class:`CostModel`): the flows end up with
  max-min fair shares of pod time, not of request counts.

Ordering within a flow (FCFS or EDF) is the queue's (:mod:`mmgate.control.flow.queues`). All of it
is pure: no clock, no I/O.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from mmgate.control.flow.queues import Band, FlowQueue, HeldRequest
from mmgate.request.view import RequestView

CanGo = Callable[[HeldRequest], bool]


class FairnessPolicy(Protocol):
    """One band's fairness across its flows (one instance per band: its state is the band's)."""

    def pick(self, band: Band, can_go: CanGo) -> FlowQueue | None:
        """The flow whose head goes next (a flow with requests held), or ``None``."""
        ...

    def backlogged(self, band: Band, fairness_id: str) -> None:
        """``fairness_id`` had nothing held in ``band`` and now has (called before it is added)."""
        ...

    def served(self, band: Band, fairness_id: str, cost: float) -> None:
        """A request of ``fairness_id`` was dispatched; ``cost``: what it was charged."""
        ...

    def observed(self, band: Band, fairness_id: str, cost: float) -> None:
        """``fairness_id``'s charge corrected by ``cost`` (output generated, once observed)."""
        ...


class GlobalStrict:
    """The band's oldest dispatchable request first (llm-d ``global-strict-fairness-policy``)."""

    def pick(self, band: Band, can_go: CanGo) -> FlowQueue | None:
        best: FlowQueue | None = None
        best_seq = 0
        for queue in band.flows.values():
            head = queue.head()
            if head is not None and (best is None or head.seq < best_seq) and can_go(head):
                best, best_seq = queue, head.seq
        return best

    def backlogged(self, band: Band, fairness_id: str) -> None:
        pass

    def served(self, band: Band, fairness_id: str, cost: float) -> None:
        pass

    def observed(self, band: Band, fairness_id: str, cost: float) -> None:
        pass


class RoundRobin:
    """Flows in turn, one request each (llm-d ``round-robin-fairness-policy``): the flow after
    the one served last, in the order flows became backlogged."""

    def __init__(self) -> None:
        self._last: str | None = None

    def pick(self, band: Band, can_go: CanGo) -> FlowQueue | None:
        names = list(band.flows)
        if not names:
            return None
        start = names.index(self._last) + 1 if self._last in band.flows else 0
        for i in range(len(names)):
            queue = band.flows[names[(start + i) % len(names)]]
            head = queue.head()
            if head is not None and can_go(head):
                return queue
        return None

    def backlogged(self, band: Band, fairness_id: str) -> None:
        pass

    def served(self, band: Band, fairness_id: str, cost: float) -> None:
        self._last = fairness_id

    def observed(self, band: Band, fairness_id: str, cost: float) -> None:
        pass


MAX_COUNTERS = 65_536
"""Counters kept at most; beyond it, idle flows at or under the floor are dropped (a returning
flow is lifted to the floor anyway, so dropping them changes nothing)."""


class VirtualCost:
    """Virtual cost counters over media-aware cost (``media-cost-fairness-policy``)."""

    def __init__(self) -> None:
        self.counters: dict[str, float] = {}
        self._floor = 0.0  # the smallest backlogged counter when a flow was last served

    def pick(self, band: Band, can_go: CanGo) -> FlowQueue | None:
        """The smallest counter; on a tie (a flow just lifted to the floor ties with the flow
        that set it) the cheaper head request, so a light request joining a heavy flood waits for
        at most the heavy request in service, not also the next one; then the older head."""
        counters = self.counters
        best: FlowQueue | None = None
        best_rank = (0.0, 0.0, 0)
        for name, queue in band.flows.items():
            counter = counters.get(name, 0.0)
            if best is not None and counter > best_rank[0]:
                continue
            head = queue.head()
            if head is None:
                continue
            rank = (counter, head.cost, head.seq)
            if (best is None or rank < best_rank) and can_go(head):
                best, best_rank = queue, rank
        return best

    def backlogged(self, band: Band, fairness_id: str) -> None:
        counters = self.counters
        others = [counters.get(n, 0.0) for n in band.flows if n != fairness_id]
        floor = min(others) if others else self._floor
        counters[fairness_id] = max(counters.get(fairness_id, 0.0), floor)
        if len(counters) > MAX_COUNTERS:
            for name in [n for n, c in counters.items() if c <= self._floor and n not in band.flows]:
                del counters[name]

    def served(self, band: Band, fairness_id: str, cost: float) -> None:
        counters = self.counters
        counters[fairness_id] = counters.get(fairness_id, 0.0) + cost
        if band.flows:
            self._floor = min(counters.get(n, 0.0) for n in band.flows)

    def observed(self, band: Band, fairness_id: str, cost: float) -> None:
        self.counters[fairness_id] = self.counters.get(fairness_id, 0.0) + cost


@dataclass(slots=True, frozen=True)
class CostModel:
    """What a request costs a pod, in estimated pod-seconds: its prompt tokens (media tokens as
    the served family prices them) at the prefill rate, its media tokens again at the encoder's
    rate (the vision/audio encoder runs before prefill), and its output tokens at the per-request
    decode rate."""

    prefill_tokens_per_s: float = 15_000.0
    encoder_tokens_per_s: float = 20_000.0
    output_tokens_per_s: float = 2_000.0
    default_output_tokens: int = 256

    def prompt(self, total_tokens: int, media_tokens: int) -> float:
        return total_tokens / self.prefill_tokens_per_s + media_tokens / self.encoder_tokens_per_s

    def output(self, tokens: int) -> float:
        return tokens / self.output_tokens_per_s

    def expected_output(self, view: RequestView) -> int:
        return view.max_tokens if view.max_tokens is not None else self.default_output_tokens
