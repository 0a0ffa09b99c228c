"""A request that flow control lets through at once is priced once: by the picker (the
scheduler's token producer), whose tokens the controller charges to the flow; the gate prices it
itself only when the picker reports no tokens (the discrete-event benchmark's picker)."""

from __future__ import annotations

from typing import Any

import pytest

from mmgate.control.decision import Decision
from mmgate.control.flow import FlowGate
from mmgate.control.flow.classify import FlowKey
from mmgate.request.view import Api, RequestView
from support.flow import one_pod_controller
from support.upstreams import OrderRouter

CONFIG = """
apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
featureGates: [flowControl]
plugins:
- type: utilization-detector
  parameters: {maxInflightTokens: 100000}
- type: media-cost-fairness-policy
  parameters: {prefillTokensPerSecond: 1000, encoderTokensPerSecond: 500, outputTokensPerSecond: 100}
flowControl:
  saturationDetector: {pluginRef: utilization-detector}
  defaultPriorityBand: {fairnessPolicyRef: media-cost-fairness-policy}
"""
POD = "10.0.0.1:8000"
VIEW = RequestView(api=Api.CHAT, model="m", parts=["hello"], body=b"{}", max_tokens=10)


class CountingGate(FlowGate):
    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.priced = 0

    def tokens(self, view: RequestView) -> tuple[int, int]:
        self.priced += 1
        return super().tokens(view)


class Unpriced(OrderRouter):
    """A picker that reports no tokens, as the discrete-event benchmark's does."""

    def decide(self, view: RequestView, candidates: Any, now: float, **context: Any) -> Decision:
        decision = super().decide(view, candidates, now, **context)
        decision.request_tokens, decision.tokens_by_modality = 0, {}
        return decision


@pytest.mark.parametrize("picker", [OrderRouter(), Unpriced()])
def test_a_request_that_goes_at_once_is_priced_once(picker: OrderRouter) -> None:
    ctl, gate = one_pod_controller(CONFIG, picker, CountingGate, POD)
    assert isinstance(gate, CountingGate)
    charged: list[tuple[FlowKey, float]] = []
    gate.dispatcher.passed = lambda key, cost: charged.append((key, cost))  # type: ignore[method-assign]
    flight = ctl.open(VIEW, "r", {})
    assert ctl.admit_now(flight)
    attempt = ctl.decide(flight)
    assert attempt is not None and attempt.endpoint == POD
    if isinstance(picker, Unpriced):
        tokens, media = gate.tokens(VIEW)
        assert gate.priced == 2  # once for the request (cost and in-flight tokens), once just now
    else:
        tokens, media = 42, 2  # the decision's: 40 text and 2 image tokens
        assert gate.priced == 0
    expected = tokens / 1000 + media / 500 + 10 / 100  # prompt, encoder, max_tokens of output
    assert charged == [(FlowKey("default-flow", 0), pytest.approx(expected))]
    assert gate.dispatcher.loads[POD].tokens == tokens  # the detector's in-flight tokens
