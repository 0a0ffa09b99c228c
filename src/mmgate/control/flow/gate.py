"""Flow control as the request controller uses it: a request's flow, cost and size worked out
once, then handed to the pure :class:`~mmgate.control.flow.dispatcher.FlowDispatcher`.

The controller (:mod:`mmgate.control.controller`) calls :meth:`FlowGate.item` to make a request's
held form, :meth:`FlowGate.dispatcher` for the rest. Nothing here awaits or reads a clock: the
controller passes the time, and the transport's event loop (or the discrete-event benchmark's
virtual one) arms the TTL timer at :meth:`~mmgate.control.flow.dispatcher.FlowDispatcher.next_expiry`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import msgspec

from mmgate.control.flow.classify import Classifier, FlowKey
from mmgate.control.flow.dispatcher import FlowDispatcher
from mmgate.control.flow.queues import HeldRequest, Reject, Release
from mmgate.control.flow.saturation import SaturationDetector
from mmgate.control.flow.settings import FlowSettings
from mmgate.datalayer.metrics import MetricsSnapshot
from mmgate.request.view import RequestView
from mmgate.tokens import PricingConfig, price


class Ticket(msgspec.Struct, frozen=True):
    """A request classified: its flow; its cost (0 unless its band prices requests); the output
    tokens that cost assumed (to correct once usage is observed); its priced prompt tokens (0
    unless priced); its TTFT target under EDF ordering (``None``: not EDF)."""

    key: FlowKey
    cost: float
    expected_output: int
    prompt_tokens: int
    ttft_target_s: float | None


class FlowGate:
    def __init__(
        self,
        settings: FlowSettings,
        metrics_of: Callable[[str], MetricsSnapshot | None],
        pricing: PricingConfig | None = None,
    ) -> None:
        self.settings = settings
        self.pricing = pricing if pricing is not None else PricingConfig()
        self.classifier = Classifier(settings.objectives)
        self._counts_tokens = settings.detector.max_inflight_tokens > 0
        self.dispatcher = FlowDispatcher(
            SaturationDetector(settings.detector), metrics_of, settings.plan, settings.limits
        )

    def ticket(self, view: RequestView, headers: Mapping[str, str], tenant: str | None) -> Ticket:
        """A request's flow, and what its band needs of it: its cost (priced only when its band's
        fairness counts cost or the detector bounds in-flight tokens) and its TTFT target."""
        key: FlowKey = self.classifier.classify(headers, tenant)
        plan = self.settings.plan(key.priority)
        cost, expected, tokens = 0.0, 0, 0
        if plan.cost is not None or self._counts_tokens:
            priced = price(view, self.pricing)
            tokens = priced.total_tokens
            if plan.cost is not None:
                expected = plan.cost.expected_output(view)
                cost = plan.cost.prompt(tokens, priced.media_tokens) + plan.cost.output(expected)
        target = None
        if plan.edf:
            target = self.classifier.ttft_target(headers)
            if target is None:
                target = plan.edf_default_target_s
        return Ticket(key, cost, expected, tokens, target)

    def held(
        self,
        ticket: Ticket,
        view: RequestView,
        candidates: Sequence[str],
        now: float,
        release: Release,
        reject: Reject,
    ) -> HeldRequest:
        """The held form of a request (for :meth:`FlowDispatcher.submit`)."""
        deadline = now + ticket.ttft_target_s if ticket.ttft_target_s is not None else float("inf")
        return HeldRequest(
            ticket.key,
            tuple(candidates),
            arrived=now,
            size=len(view.body),
            cost=ticket.cost,
            deadline=deadline,
            release=release,
            reject=reject,
        )

    def output_correction(self, priority: int, expected: int, observed: int) -> float:
        """The cost of ``observed`` output tokens less the ``expected`` ones already charged."""
        plan = self.settings.plan(priority)
        if plan.cost is None:
            return 0.0
        return plan.cost.output(observed) - plan.cost.output(expected)
