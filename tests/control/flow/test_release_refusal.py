"""A held request whose decision on release finds the client's own mistake (the picker prices
it only then, e.g. an image beyond the largest side a model takes) is answered with that error;
the request whose end released it finishes normally. Release runs inside another request's
``finished`` (or a scrape), so an exception there would break a stranger's answer and leave the
held one waiting for ever."""

from __future__ import annotations

from typing import Any

from mmgate.control.controller import Refusal
from mmgate.control.decision import Decision
from mmgate.errors import RequestError
from mmgate.request.view import Api, RequestView
from support.flow import one_pod_controller
from support.upstreams import OrderRouter

CONFIG = """
apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
featureGates: [flowControl]
plugins:
- type: utilization-detector
  parameters: {maxInflightRequests: 1}
flowControl:
  saturationDetector: {pluginRef: utilization-detector}
"""


def view(model: str) -> RequestView:
    return RequestView(api=Api.CHAT, model=model, parts=["hello"], body=b"{}", max_tokens=10)


class RefusesBad(OrderRouter):
    """Prices the model ``bad`` as a client mistake, as the token producer does an image too large."""

    def decide(self, view: RequestView, candidates: Any, now: float, **context: Any) -> Decision:
        if view.model == "bad":
            raise RequestError("image width 99999 exceeds the maximum", param="messages[0].content[1]")
        return super().decide(view, candidates, now, **context)


def test_a_mistake_found_on_release_answers_the_held_request_not_the_releaser() -> None:
    ctl, gate = one_pod_controller(CONFIG, RefusesBad())

    first = ctl.open(view("m"), "first", {})
    assert ctl.admit_now(first)
    attempt = ctl.decide(first)
    assert attempt is not None  # one in flight: the pod is saturated now

    held = ctl.open(view("bad"), "held", {})
    assert not ctl.admit_now(held)  # saturated: it must wait
    outcomes: list[str] = []
    refusals: list[Refusal] = []
    item = ctl.hold(held, lambda: outcomes.append("released"), refusals.append)
    assert item is not None and item.queued and gate.dispatcher.count == 1

    ctl.finished(attempt, ok=True)  # frees the pod: the held request is decided now

    assert gate.dispatcher.count == 0
    assert outcomes == []
    assert len(refusals) == 1 and isinstance(refusals[0], RequestError)
    assert refusals[0].status == 400 and refusals[0].param == "messages[0].content[1]"

    after = ctl.open(view("m"), "after", {})  # the pod is free again: nothing was left placed
    assert ctl.admit_now(after)
    assert ctl.decide(after) is not None
