"""Upstream faults from the simulator's fault injection: error bursts, refused connections, stalls,
resets, a flapping pod, client disconnects and shutdown. Every accepted request either completes
or ends with a clear error; nothing hangs."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

import aiohttp

from support.probes import assert_openai_error, config, pod_metric
from support.stack import Stack, chat_body, stack


async def set_faults(s: Stack, pod_url: str, **faults: Any) -> None:
    async with s.session.post(pod_url + "/admin/faults", json=faults) as resp:
        assert resp.status == 200, await resp.text()


async def aborts(s: Stack, pod_url: str) -> float:
    return await pod_metric(s, pod_url, "vllm:request_success_total", finished_reason="abort")


@dataclass
class Result:
    status: int = 0
    endpoint: str = ""
    done: bool = False  # the stream ended with [DONE] (or a whole JSON answer arrived)
    error: str = ""  # a clear failure: an OpenAI error body, or a cut stream
    seconds: float = 0.0


async def ask(s: Stack, text: str, *, stream: bool = True, max_tokens: int = 6) -> Result:
    result = Result()
    started = time.monotonic()
    body = chat_body(s.model, text, max_tokens=max_tokens, stream=stream)
    try:
        async with s.session.post(s.url + "/v1/chat/completions", data=body) as resp:
            result.status = resp.status
            result.endpoint = resp.headers.get("x-mmgate-endpoint", "")
            data = await resp.read()
            if resp.status != 200:
                result.error = assert_openai_error(resp.status, data, resp.status)["message"]
            elif stream:
                result.done = data.endswith(b"data: [DONE]\n\n")
            else:
                result.done = b'"choices"' in data
    except aiohttp.ClientPayloadError as exc:  # the gateway cut a broken stream
        result.error = f"cut: {exc}"
    result.seconds = time.monotonic() - started
    return result


async def test_429_500_503_bursts_on_one_pod_are_retried_on_the_others() -> None:
    async with stack(config(), pods=3) as s:
        bad = s.fleet.urls[0]
        for fault in ("rate_429", "rate_500", "rate_503"):
            await set_faults(s, bad, **{fault: 1.0})
            results = await asyncio.gather(*(ask(s, f"{fault} {k}", stream=k % 2 == 0) for k in range(12)))
            assert all(r.done for r in results), results
            assert all(r.endpoint != bad.removeprefix("http://") for r in results)
            await set_faults(s, bad, **{fault: 0.0})
        metrics = await (await s.session.get(s.url + "/metrics")).text()
        for reason in ("429", "500", "503"):
            assert f'mmgate_retries_total{{reason="{reason}"}}' in metrics


async def test_a_killed_pod_refuses_connections_and_requests_are_retried_elsewhere() -> None:
    async with stack(config(), pods=3) as s:
        victim = s.fleet.pods[0]
        dead = victim.url.removeprefix("http://")
        await victim.stop()  # connection refused from now on; the scraper has not noticed yet
        results = await asyncio.gather(*(ask(s, f"refused {k}", stream=k % 2 == 0) for k in range(12)))
        assert all(r.done and r.endpoint != dead for r in results), results
        metrics = await (await s.session.get(s.url + "/metrics")).text()
        assert f'mmgate_upstream_errors_total{{endpoint="{dead}",reason="connect"}}' in metrics
        await asyncio.sleep(0.5)
        record = s.running.gateway.data.registry.get(dead)
        assert record is not None and not record.health.healthy


async def test_when_the_whole_fleet_fails_clients_get_the_error_fast_and_retries_are_bounded() -> None:
    # A read timeout far beyond any loaded machine's loopback round trips: an answer that waited
    # for it (instead of passing on the pods' 503s) would show in the seconds.
    async with stack(config(maxRetries=2, readTimeoutS=60.0), pods=3) as s:
        for url in s.fleet.urls:
            await set_faults(s, url, rate_503=1.0)
        results = await asyncio.gather(*(ask(s, f"all down {k}") for k in range(10)))
        assert all(r.status == 503 and r.error and r.seconds < 60.0 for r in results), results
        metrics = await (await s.session.get(s.url + "/metrics")).text()
        retries = sum(
            float(line.rsplit(" ", 1)[1])
            for line in metrics.splitlines()
            if line.startswith("mmgate_retries_total{")
        )
        assert retries <= 2 * len(results)


async def test_a_stalled_pod_is_skipped_after_the_read_timeout() -> None:
    async with stack(config(readTimeoutS=0.5), pods=2) as s:
        stalled = s.fleet.urls[0]
        await set_faults(s, stalled, stalled=True)
        results = await asyncio.gather(*(ask(s, f"stall {k}", stream=k % 2 == 0) for k in range(6)))
        assert all(r.done for r in results), results  # the stall is open-ended: only the timeout ends it
        assert all(r.endpoint != stalled.removeprefix("http://") for r in results)
        metrics = await (await s.session.get(s.url + "/metrics")).text()
        assert 'mmgate_retries_total{reason="timeout"}' in metrics


async def test_a_stream_that_stalls_midway_is_cut_and_the_pod_sees_the_abort() -> None:
    async with stack(config(readTimeoutS=0.5), pods=1, time_scale=2.0) as s:
        pod = s.fleet.urls[0]
        body = chat_body(s.model, "a long story", max_tokens=200, stream=True)
        started = time.monotonic()
        async with s.session.post(s.url + "/v1/chat/completions", data=body) as resp:
            assert resp.status == 200
            await resp.content.readany()
            await set_faults(s, pod, stalled=True)  # open-ended: only the read timeout can end it
            cut = False
            try:
                while await resp.content.readany():
                    pass
            except aiohttp.ClientPayloadError:
                cut = True
        assert cut  # a truncated stream, never a clean end
        assert time.monotonic() - started >= 0.5
        await set_faults(s, pod, stalled=False)  # the pod notices the gone client at its next token
        await wait_for(lambda: aborts(s, pod), 1.0, timeout=5.0)


async def test_a_reset_during_streaming_reaches_the_client_as_a_cut_stream() -> None:
    async with stack(config(), pods=1) as s:
        await set_faults(s, s.fleet.urls[0], rate_reset=1.0)
        results = await asyncio.gather(*(ask(s, f"reset {k}", max_tokens=30) for k in range(4)))
        assert all(r.status == 200 and not r.done and r.error.startswith("cut") for r in results), results


async def test_a_client_disconnect_cancels_the_upstream_request() -> None:
    async with stack(config(), pods=1, time_scale=2.0) as s:
        pod = s.fleet.urls[0]
        body = chat_body(s.model, "a long story", max_tokens=500, stream=True)
        resp = await s.session.post(s.url + "/v1/chat/completions", data=body)
        assert resp.status == 200
        await resp.content.readany()
        resp.close()  # the client goes away mid-stream
        await wait_for(lambda: aborts(s, pod), 1.0, timeout=5.0)
        metrics = await (await s.session.get(s.url + "/metrics")).text()
        assert 'status="client_closed"' in metrics


async def test_a_flapping_pod_loses_no_request() -> None:
    async with stack(config(), pods=2) as s:
        flappy = s.fleet.urls[0]
        stop = asyncio.Event()

        async def flap() -> None:
            up = True
            while not stop.is_set():
                await set_faults(s, flappy, rate_503=0.0 if up else 1.0)
                up = not up
                await asyncio.sleep(0.1)

        flapper = asyncio.create_task(flap())
        try:
            results: list[Result] = []
            for wave in range(4):
                results += await asyncio.gather(*(ask(s, f"flap {wave} {k}") for k in range(8)))
        finally:
            stop.set()
            await flapper
        assert all(r.done for r in results), [r for r in results if not r.done]


async def test_mixed_faults_every_accepted_request_completes_or_gets_a_clear_error() -> None:
    async with stack(config(readTimeoutS=1.0), pods=3) as s:
        for k, url in enumerate(s.fleet.urls):
            await set_faults(s, url, rate_429=0.1 * k, rate_500=0.05, rate_reset=0.05 if k == 2 else 0.0)
        results = await asyncio.wait_for(
            asyncio.gather(*(ask(s, f"mixed {k}", stream=k % 3 != 0) for k in range(60))), timeout=30
        )
        for r in results:
            assert r.done or r.error, r  # nothing silent
            assert not (r.done and r.error)
        assert sum(r.done for r in results) >= 45


async def test_graceful_shutdown_drains_in_flight_streams() -> None:
    async with stack(config(), pods=1, time_scale=3.0) as s:
        streams = [asyncio.create_task(ask(s, f"drain {k}", max_tokens=40)) for k in range(4)]
        while s.running.gateway.inflight < 4:
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.1)  # the streams are flowing
        assert not any(t.done() for t in streams)
        await s.running.stop()  # stops listening, waits for in-flight handlers
        results = await asyncio.gather(*streams)
        assert all(r.done for r in results), results
        try:
            async with s.session.post(s.url + "/v1/chat/completions", data=chat_body(s.model, "late")) as r:
                late = r.status
        except aiohttp.ClientConnectionError:
            late = 0
        assert late == 0  # no longer listening


async def wait_for(read: Any, at_least: float, *, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        value = await read()
        if value >= at_least:
            return
        assert time.monotonic() < deadline, f"counter stayed at {value}"
        await asyncio.sleep(0.05)
