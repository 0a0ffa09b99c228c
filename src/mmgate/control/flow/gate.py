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

from mmgate.control.apikeys import Identity
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

    def ticket(
        self, view: RequestView, headers: Mapping[str, str], identity: Identity | None, *, priced: bool = True
    ) -> Ticket:
        """A request's flow, and what its band needs of it: its cost (priced only when its band's
        fairness counts cost or the detector bounds in-flight tokens; ``priced=False``: not
        here, the caller prices it with :meth:`cost` once it knows the tokens) and its TTFT
        target."""
        key: FlowKey = self.classifier.classify(headers, identity)
        plan = self.settings.plan(key.priority)
        cost, expected, tokens = 0.0, 0, 0
        if priced and (plan.cost is not None or self._counts_tokens):
            tokens, media = self.tokens(view)
            cost, expected = self.cost(key.priority, view, tokens, media)
        target = None
        if plan.edf:
            target = self.classifier.ttft_target(headers, identity)
            if target is None:
                target = plan.edf_default_target_s
        return Ticket(key, cost, expected, tokens, target)

    def prices(self, priority: int) -> bool:
        """Whether requests of ``priority`` need their tokens: their band's fairness counts cost."""
        return self.settings.plan(priority).cost is not None

    @property
    def counts_tokens(self) -> bool:
        """Whether the detector bounds the tokens in flight per endpoint."""
        return self._counts_tokens

    def tokens(self, view: RequestView) -> tuple[int, int]:
        """The request's prompt tokens and, of them, media tokens, priced by the gate."""
        priced = price(view, self.pricing)
        return priced.total_tokens, priced.media_tokens

    def cost(self, priority: int, view: RequestView, tokens: int, media: int) -> tuple[float, int]:
        """What a request of ``tokens`` prompt tokens (``media`` of them media) costs in its band,
        and the output tokens that cost assumes (0 and 0: its band does not count cost)."""
        model = self.settings.plan(priority).cost
        if model is None:
            return 0.0, 0
        expected = model.expected_output(view)
        return model.prompt(tokens, media) + model.output(expected), expected

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
