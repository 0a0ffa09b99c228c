"""The real Scheduler behind the gateway: lifecycle accounting, retries, debug scores, forgetting."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import aiohttp
import pytest

from mmgate.config import load_config_text
from mmgate.control.scheduler_picker import SchedulerPicker
from mmgate.datalayer.endpoints import EndpointRecord, EndpointRegistry, parse_endpoint
from mmgate.gateway.proxy import ProxySettings
from mmgate.request.view import Api, MediaAsset, Modality, RequestView, Source
from mmgate.scheduling import build_scheduler
from support.processes import REPO
from support.upstreams import Upstream, free_port, sse_behaviour, start_gateway

ROUND_ROBIN = """
apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: round-robin-picker
- type: queue-scorer
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: round-robin-picker
  - pluginRef: queue-scorer
"""

BODY = b'{"model": "m", "messages": [{"role": "user", "content": "hello there"}]}'


@pytest.fixture
async def upstreams() -> AsyncIterator[list[Upstream]]:
    ups = [Upstream() for _ in range(3)]
    for u in ups:
        await u.start()
    yield ups
    for u in ups:
        await u.stop()


def make_router() -> SchedulerPicker:
    config = load_config_text(ROUND_ROBIN)
    return SchedulerPicker(build_scheduler(config.picker, mmgate=config.mmgate, seed=1))


async def test_round_robin_spreads_and_inflight_returns_to_zero(upstreams: list[Upstream]) -> None:
    router = make_router()
    _, running, url = await start_gateway([u.address for u in upstreams], router)
    for u in upstreams:
        u.behaviour = sse_behaviour([b"data: 1\n\n", b"data: [DONE]\n\n"], delay=0.02)
    try:
        async with aiohttp.ClientSession() as session:

            async def one() -> tuple[str, str]:
                async with session.post(url + "/v1/chat/completions", data=BODY) as resp:
                    await resp.read()
                    return resp.headers["x-mmgate-endpoint"], resp.headers["x-mmgate-request-tokens"]

            results = await asyncio.gather(*(one() for _ in range(9)))
        assert sorted(n for n, _ in results) == sorted([u.address for u in upstreams] * 3)
        assert all(int(t) > 0 for _, t in results)  # priced even without a token-producer
        assert router.scheduler.active_requests == 0
        assert all(s.inflight.requests == 0 for s in router.states.values())
    finally:
        await running.stop()


async def test_retry_releases_the_failed_attempt_and_scores_are_reported(upstreams: list[Upstream]) -> None:
    router = make_router()
    dead = f"127.0.0.1:{free_port()}"
    gateway, running, url = await start_gateway(
        [dead, upstreams[0].address], router, proxy=ProxySettings(debug_scores=True)
    )
    try:
        async with aiohttp.ClientSession() as session:
            for _ in range(4):
                async with session.post(
                    url + "/v1/chat/completions", data=BODY, headers={"x-mmgate-debug": "1"}
                ) as r:
                    assert r.status == 200
                    assert r.headers["x-mmgate-endpoint"] == upstreams[0].address
                    assert "queue-scorer=" in r.headers["x-mmgate-scores"]
        assert router.scheduler.active_requests == 0
        assert all(s.inflight.requests == 0 for s in router.states.values())
        gateway.data.registry.remove(dead)
        assert dead not in router.states
    finally:
        await running.stop()


def test_clients_reusing_a_request_id_do_not_corrupt_inflight_accounting() -> None:
    router = make_router()
    registry = EndpointRegistry()
    records = [registry.add(parse_endpoint(a)) for a in ("127.0.0.1:1", "127.0.0.1:2")]
    view = RequestView(api=Api.CHAT, model="m", parts=["hello"], body=BODY)
    first, second = (
        router.decide(view, records, 0.0, request_id="same-id", headers={}, debug=False) for _ in range(2)
    )
    router.started(first)
    router.started(second)
    router.finished(first, ok=True)
    # The second request is still running and must still count.
    assert sum(s.inflight.requests for s in router.states.values()) == 1
    router.finished(second, ok=True)
    assert sum(s.inflight.requests for s in router.states.values()) == 0


def _epd_router() -> tuple[SchedulerPicker, list[EndpointRecord]]:

    text = (REPO / "examples" / "e-pd.yaml").read_text()
    config = load_config_text(text)
    router = SchedulerPicker(build_scheduler(config.picker, mmgate=config.mmgate, seed=1))
    registry = EndpointRegistry()
    records = [
        registry.add(parse_endpoint("127.0.0.1:1", role="encode")),
        registry.add(parse_endpoint("127.0.0.1:2", role="prefill-decode")),
    ]
    return router, records


def _image_view() -> RequestView:
    image = MediaAsset(
        modality=Modality.IMAGE, source=Source.URL, identity="img-1", field="messages[0].content[0]"
    )
    image.width, image.height, image.probed = 1280, 720, True
    return RequestView(api=Api.CHAT, model="m", parts=["<|user|>\n", image, "what is this?"], body=BODY)


def test_encode_pods_carry_the_load_of_the_requests_they_encode_for() -> None:
    router, records = _epd_router()
    decision = router.decide(_image_view(), records, 0.0, request_id="r", headers={}, debug=False)
    assert decision.endpoint == "127.0.0.1:2"
    assert decision.headers["x-encoder-hosts-ports"] == "127.0.0.1:1"
    router.started(decision)
    assert {name: s.inflight.requests for name, s in router.states.items()} == {
        "127.0.0.1:1": 1,
        "127.0.0.1:2": 1,
    }
    router.finished(decision, ok=True)
    assert all(s.inflight.requests == 0 for s in router.states.values())


def test_requests_whose_end_is_never_reported_stop_counting_as_load() -> None:
    clock = [0.0]
    config = load_config_text(ROUND_ROBIN)
    router = SchedulerPicker(
        build_scheduler(config.picker, mmgate=config.mmgate, seed=1),
        clock=lambda: clock[0],
        lost_after_s=100.0,
    )
    registry = EndpointRegistry()
    records = [registry.add(parse_endpoint("127.0.0.1:1"))]
    view = RequestView(api=Api.CHAT, model="m", parts=["hello"], body=BODY)
    router.started(router.decide(view, records, 0.0, request_id="lost", headers={}, debug=False))
    assert router.scheduler.active_requests == 1
    clock[0] = 50.0  # a sweep runs, but the request is not old enough to be called lost
    router.started(router.decide(view, records, 50.0, request_id="alive", headers={}, debug=False))
    assert router.scheduler.active_requests == 2
    clock[0] = 120.0
    router.decide(view, records, 120.0, request_id="next", headers={}, debug=False)
    assert router.scheduler.active_requests == 1  # only "lost" was released
