"""The request controller on its own: candidates narrowed in one place, retries that exclude the
endpoints tried, the attempt limit and budget, PreRequest work handed to the deferral, and every
endpoint a request was started on released when it ends. No transport: a clock and a picker."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from mmgate.config import load_config_text
from mmgate.control import (
    AdmissionSettings,
    BreakerSettings,
    ControlSettings,
    NoCandidates,
    Overloaded,
    RequestController,
    SchedulerPicker,
    Usage,
)
from mmgate.datalayer.endpoints import EndpointRegistry, parse_endpoint
from mmgate.errors import RequestError
from mmgate.request.view import Api, RequestView
from mmgate.scheduling import build_scheduler
from support.upstreams import OrderRouter

ENDPOINTS = ("10.0.0.1:8000", "10.0.0.2:8000", "10.0.0.3:8000")
VIEW = RequestView(api=Api.CHAT, model="m", parts=["hello"], body=b"{}")


def controller(
    settings: ControlSettings | None = None, *, order: tuple[str, ...] = ENDPOINTS
) -> tuple[RequestController, OrderRouter, EndpointRegistry, list[Callable[[], None]]]:
    registry = EndpointRegistry()
    for address in ENDPOINTS:
        registry.add(parse_endpoint(address))
    picker = OrderRouter(order=list(order))
    deferred: list[Callable[[], None]] = []
    ctl = RequestController(picker, registry, settings, clock=lambda: 0.0, defer=deferred.append)
    return ctl, picker, registry, deferred


def test_candidates_are_the_healthy_endpoints_serving_the_model_within_the_subset() -> None:
    ctl, _, registry, _ = controller()
    sick = registry.get(ENDPOINTS[0])
    assert sick is not None
    for _ in range(sick.health.failure_threshold):
        sick.health.record_failure("down")
    flight = ctl.open(VIEW, "r", {})
    assert [r.name for r in flight.candidates] == list(ENDPOINTS[1:])
    flight = ctl.open(VIEW, "r", {}, subset={ENDPOINTS[2]})
    assert [r.name for r in flight.candidates] == [ENDPOINTS[2]]
    with pytest.raises(NoCandidates, match="no healthy endpoint for model 'm'"):
        ctl.open(VIEW, "r", {}, subset={ENDPOINTS[0]})


def test_a_model_no_endpoint_serves_is_a_404_naming_the_served_ones() -> None:
    ctl, _, registry, _ = controller()
    for record in registry.records():
        record.models = ("other",)
        record.model_cards = ({"id": "other"},)
    with pytest.raises(RequestError) as refused:
        ctl.open(VIEW, "r", {})
    assert refused.value.status == 404 and "available: other" in str(refused.value)


def test_retries_exclude_every_endpoint_tried_and_stop_at_the_attempt_limit() -> None:
    ctl, picker, _, _ = controller(ControlSettings(max_attempts=2))
    flight = ctl.open(VIEW, "r", {})
    first = ctl.decide(flight)
    assert first is not None and first.endpoint == ENDPOINTS[0] and not first.is_last
    assert ctl.fallbacks(first) == list(ENDPOINTS[1:])
    ctl.started(first)
    ctl.finished(first, ok=False)
    second = ctl.retry(first, "503", "HTTP 503")
    assert second is not None and second.endpoint == ENDPOINTS[1] and second.is_last
    ctl.started(second)
    ctl.finished(second, ok=False)
    assert ctl.retry(second, "503", "HTTP 503") is None  # the limit, though one endpoint is left
    assert flight.attempts == 2 and flight.errors == [f"{e}: HTTP 503" for e in ENDPOINTS[:2]]
    assert picker.calls == [("started", ENDPOINTS[0]), ("failed", ENDPOINTS[0]),
                            ("started", ENDPOINTS[1]), ("failed", ENDPOINTS[1])]  # fmt: skip


def test_a_destination_is_one_endpoint_unless_the_picker_or_the_transport_asks_for_more() -> None:
    ctl, _, _, _ = controller()
    attempt = ctl.decide(ctl.open(VIEW, "r", {}))
    assert attempt is not None
    assert ctl.destinations(attempt) == [ENDPOINTS[0]]  # llm-d's maxNumOfEndpoints default: 1
    assert ctl.destinations(attempt, 2) == list(ENDPOINTS[:2])
    assert ctl.destinations(attempt, 99) == list(ENDPOINTS)
    attempt.decision.picked = 3  # the picker chose three (maxNumOfEndpoints: 3)
    assert ctl.destinations(attempt) == list(ENDPOINTS[:3])
    assert ctl.destinations(attempt, 1) == [ENDPOINTS[0]]


def test_ejected_endpoints_are_not_candidates_until_all_are() -> None:
    settings = ControlSettings(breaker=BreakerSettings(consecutive_failures=1))
    ctl, _, _, _ = controller(settings)
    flight = ctl.open(VIEW, "a", {})
    attempt = ctl.decide(flight)
    assert attempt is not None
    ctl.started(attempt)
    ctl.finished(attempt, ok=False)
    ctl.retry(attempt, "connect", "refused", unreachable=True)
    assert ctl.circuit(ENDPOINTS[0]) == "open"
    again = ctl.decide(ctl.open(VIEW, "b", {}))
    assert again is not None and again.endpoint == ENDPOINTS[1]  # the preferred one is ejected


def test_index_hooks_go_to_the_deferral_and_headers_come_with_the_decision() -> None:
    ctl, picker, _, deferred = controller()
    attempt = ctl.decide(ctl.open(VIEW, "r", {}))
    assert attempt is not None
    assert attempt.headers == {"x-prefiller-host-port": "10.0.0.1:1"}  # before anything is sent
    assert deferred == []
    ctl.started(attempt)
    assert len(deferred) == 1 and picker.hooks == 0  # handed over, not run inline
    deferred[0]()
    assert picker.hooks == 1


EPD = """
apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: always-disagg-pd-decider
- type: disagg-profile-handler
  parameters: {deciders: {prefill: always-disagg-pd-decider}}
- type: prefill-filter
- type: decode-filter
schedulingProfiles:
- {name: prefill, plugins: [{pluginRef: prefill-filter}]}
- {name: decode, plugins: [{pluginRef: decode-filter}]}
"""


def test_every_stage_pod_carries_the_request_until_its_leg_is_over() -> None:
    """The decode pod until the request ends; the prefill pod until the first byte (its leg
    returned before the decode pod could answer)."""
    registry = EndpointRegistry()
    registry.add(parse_endpoint("10.0.0.1:8000", role="prefill"))
    registry.add(parse_endpoint("10.0.0.2:8000", role="decode"))
    config = load_config_text(EPD)
    picker = SchedulerPicker(build_scheduler(config.picker, mmgate=config.mmgate, seed=1), clock=lambda: 0.0)
    ctl = RequestController(picker, registry, clock=lambda: 0.0)
    attempt = ctl.decide(ctl.open(VIEW, "r", {}))
    assert attempt is not None and attempt.endpoint == "10.0.0.2:8000"
    assert attempt.headers == {"x-prefiller-host-port": "10.0.0.1:8000"}  # the default handler
    ctl.started(attempt)
    assert {n: s.inflight.requests for n, s in picker.states.items()} == {
        "10.0.0.1:8000": 1,
        "10.0.0.2:8000": 1,
    }
    ctl.first_byte(attempt, 200)
    assert {n: s.inflight.requests for n, s in picker.states.items()} == {
        "10.0.0.1:8000": 0,
        "10.0.0.2:8000": 1,
    }
    ctl.usage(attempt, Usage(prompt_tokens=5, completion_tokens=3))
    ctl.finished(attempt, ok=True)
    assert all(s.inflight.requests == 0 for s in picker.states.values())


@pytest.mark.parametrize(("decode_pods", "last"), [(1, True), (2, False)])
def test_only_pods_that_pass_the_serving_filters_count_as_retry_targets(decode_pods: int, last: bool) -> None:
    """A prefill pod is a candidate the decode filter drops: with one decode pod the first
    attempt is the last, so its error answer (a sidecar's 503) is what the client gets."""
    registry = EndpointRegistry()
    registry.add(parse_endpoint("10.0.0.1:8000", role="prefill"))
    registry.add(parse_endpoint("10.0.0.9:8000", role="prefill"))
    for i in range(decode_pods):
        registry.add(parse_endpoint(f"10.0.0.{2 + i}:8000", role="decode"))
    config = load_config_text(EPD)
    picker = SchedulerPicker(build_scheduler(config.picker, mmgate=config.mmgate, seed=1), clock=lambda: 0.0)
    ctl = RequestController(picker, registry, clock=lambda: 0.0)
    flight = ctl.open(VIEW, "r", {})
    attempt = ctl.decide(flight)
    assert attempt is not None and attempt.is_last is last
    ctl.started(attempt)
    ctl.finished(attempt, ok=False)
    again = ctl.retry(attempt, "503", "HTTP 503")
    if last:
        assert again is None
    else:
        assert again is not None and again.is_last and again.endpoint != attempt.endpoint


async def test_admission_slots_are_taken_and_given_back() -> None:
    ctl, _, _, _ = controller(ControlSettings(max_inflight=1))
    flight = ctl.open(VIEW, "r", {}, client="c")
    await ctl.admit(flight)
    assert ctl.inflight == 1
    ctl.leave(flight)
    ctl.leave(flight)  # twice is harmless
    assert ctl.inflight == 0


async def test_a_free_slot_is_taken_without_awaiting_and_a_full_gateway_queues_as_before() -> None:
    queueing = AdmissionSettings(max_queue=1, queue_timeout_s=30)
    ctl, _, _, _ = controller(ControlSettings(max_inflight=1, admission=queueing))
    first = ctl.open(VIEW, "r1", {}, client="c")
    assert ctl.admit_now(first) and ctl.inflight == 1
    second = ctl.open(VIEW, "r2", {}, client="c")
    assert not ctl.admit_now(second) and ctl.inflight == 1  # no slot: nothing taken
    waiting = asyncio.create_task(ctl.admit(second))
    await asyncio.sleep(0)
    assert not waiting.done()
    ctl.leave(first)  # the slot goes to the queued request
    await waiting
    assert ctl.inflight == 1
    ctl.leave(second)
    assert ctl.inflight == 0


def test_the_client_is_read_only_where_a_per_client_limit_needs_it() -> None:
    assert not controller()[0].reads_client
    ctl, _, _, _ = controller(ControlSettings(admission=AdmissionSettings(per_client_inflight=1)))
    assert ctl.reads_client
    assert ctl.admit_now(ctl.open(VIEW, "r1", {}, client="c"))
    with pytest.raises(Overloaded, match="this client already has 1"):
        ctl.admit_now(ctl.open(VIEW, "r2", {}, client="c"))
    assert ctl.admit_now(ctl.open(VIEW, "r3", {}, client="d"))  # another client is not held back
    assert ctl.inflight == 2
