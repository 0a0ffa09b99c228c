"""Fault injection as a gateway's reliability test would use it: flags and the admin endpoint."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import aiohttp
import pytest

from mmgate.sim.faults import Faults, FaultSettings, Outcome
from mmgate.sim.fleet import SimFleet
from mmgate.sim.server import POD_HEADER

BODY = {
    "model": "test",
    "messages": [{"role": "user", "content": "hi"}],
    "max_tokens": 20,
    "ignore_eos": True,
}


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as s:
        yield s


def test_draws_follow_the_configured_rates() -> None:
    faults = Faults(FaultSettings(rate_429=0.2, rate_503=0.3), seed=7)
    draws = [faults.draw() for _ in range(5000)]
    assert abs(draws.count(Outcome.RATE_LIMIT) / 5000 - 0.2) < 0.03
    assert abs(draws.count(Outcome.UNAVAILABLE) / 5000 - 0.3) < 0.03
    assert Outcome.SERVER_ERROR not in draws and Outcome.RESET not in draws


def test_bad_settings_are_refused_and_leave_state_unchanged() -> None:
    faults = Faults()
    for bad in ({"rate_500": 1.5}, {"rate_429": 0.6, "rate_503": 0.6}, {"slowdown": 0}, {"nope": 1}):
        with pytest.raises(ValueError):
            faults.update(bad)
    assert faults.settings == FaultSettings()


@pytest.mark.parametrize(("flag", "status"), [("rate_429", 429), ("rate_500", 500), ("rate_503", 503)])
async def test_error_faults_answer_openai_shaped_errors(
    http: aiohttp.ClientSession, flag: str, status: int
) -> None:
    async with (
        SimFleet(profile="fast", faults=FaultSettings(**{flag: 1.0})) as fleet,
        http.post(fleet.urls[0] + "/v1/chat/completions", json=BODY) as resp,
    ):
        assert resp.status == status
        assert resp.headers[POD_HEADER] == "pod-0"
        doc = await resp.json()
    assert "simulated fault" in doc["error"]["message"]


async def test_reset_fault_drops_the_stream_after_the_first_token(http: aiohttp.ClientSession) -> None:
    async with SimFleet(profile="fast", faults=FaultSettings(rate_reset=1.0)) as fleet:
        received = b""
        with pytest.raises(aiohttp.ClientError):
            async with http.post(
                fleet.urls[0] + "/v1/chat/completions", json={**BODY, "stream": True}
            ) as resp:
                assert resp.status == 200
                async for chunk in resp.content.iter_any():
                    received += chunk
        assert b'"content":' in received and b"[DONE]" not in received
        # the pod is fine afterwards: the engine dropped the request
        for _ in range(50):
            if fleet.pods[0].engine.num_requests() == 0:
                break
            await asyncio.sleep(0.02)
        assert fleet.pods[0].engine.num_requests() == 0


async def test_reset_fault_without_streaming_drops_the_connection(http: aiohttp.ClientSession) -> None:
    async with SimFleet(profile="fast", faults=FaultSettings(rate_reset=1.0)) as fleet:
        with pytest.raises(aiohttp.ClientError):
            async with http.post(fleet.urls[0] + "/v1/chat/completions", json=BODY) as resp:
                await resp.read()


async def test_admin_endpoint_changes_faults_at_run_time(http: aiohttp.ClientSession) -> None:
    async with SimFleet(profile="fast") as fleet:
        url = fleet.urls[0]
        async with http.post(url + "/admin/faults", json={"rate_503": 1.0}) as resp:
            assert resp.status == 200 and (await resp.json())["rate_503"] == 1.0
        async with http.post(url + "/v1/chat/completions", json=BODY) as resp:
            assert resp.status == 503
        async with http.post(url + "/admin/faults", json={"rate_503": 0, "slowdown": 0}) as resp:
            assert resp.status == 400
            assert "slowdown" in (await resp.json())["error"]["message"]
        async with http.post(url + "/admin/faults", json={"rate_503": 0}) as resp:
            assert resp.status == 200
        async with http.get(url + "/admin/faults") as resp:
            assert (await resp.json())["rate_503"] == 0
        async with http.post(url + "/v1/chat/completions", json=BODY) as resp:
            assert resp.status == 200


async def test_stall_holds_requests_until_lifted(http: aiohttp.ClientSession) -> None:
    async with SimFleet(profile="fast", faults=FaultSettings(stalled=True)) as fleet:
        url = fleet.urls[0]
        task = asyncio.create_task(http.post(url + "/v1/chat/completions", json=BODY))
        await asyncio.sleep(0.3)
        assert not task.done()
        async with http.post(url + "/admin/faults", json={"stalled": False}) as resp:
            assert resp.status == 200
        resp = await asyncio.wait_for(task, 5)
        assert resp.status == 200
        resp.release()


async def test_timed_stall_ends_by_itself(http: aiohttp.ClientSession) -> None:
    async with SimFleet(profile="fast") as fleet:
        url = fleet.urls[0]
        async with http.post(url + "/admin/faults", json={"stall_for": 0.4}) as resp:
            assert resp.status == 200
        t0 = time.monotonic()
        async with http.post(url + "/v1/chat/completions", json=BODY) as resp:
            assert resp.status == 200
        assert time.monotonic() - t0 >= 0.3


async def test_slowdown_stretches_steps(http: aiohttp.ClientSession) -> None:
    body = {**BODY, "max_tokens": 30}
    async with SimFleet(profile="fast") as fleet:
        pod = fleet.pods[0]
        async with http.post(fleet.urls[0] + "/v1/chat/completions", json=body) as resp:
            assert resp.status == 200
        normal = pod.metrics.busy_sim_s
        pod.faults.update({"slowdown": 20})
        async with http.post(fleet.urls[0] + "/v1/chat/completions", json=body) as resp:
            assert resp.status == 200
        slowed = pod.metrics.busy_sim_s - normal
    assert slowed > 10 * normal


async def test_an_engine_failure_turns_into_503s_not_hangs(http: aiohttp.ClientSession) -> None:
    async with SimFleet(profile="fast") as fleet:
        pod = fleet.pods[0]

        def broken_step(now: float) -> None:
            raise RuntimeError("boom")

        pod.engine.step = broken_step  # type: ignore[method-assign]
        async with http.post(pod.url + "/v1/chat/completions", json=BODY) as resp:
            assert resp.status == 503
        async with http.get(pod.url + "/health") as resp:
            assert resp.status == 503
        async with http.post(pod.url + "/v1/chat/completions", json=BODY) as resp:
            assert resp.status == 503
            assert "engine failed" in (await resp.json())["error"]["message"]
