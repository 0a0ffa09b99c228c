"""The load generator against a real local streaming server: timing, counts, failures, schedule."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator

import orjson
import pytest
from aiohttp import web

from mmgate_bench.routing.loadgen import Target, parse_cache_counters, run_ladder, workload_bodies
from mmgate_bench.routing.records import Ladder, arrival_times, parse_rates
from mmgate_bench.workloads.synthetic import image_reuse

FIRST_S = 0.08
GAP_S = 0.02
TOKENS = 6


def _chunk(payload: dict[str, object]) -> bytes:
    return b"data: " + orjson.dumps(payload) + b"\n\n"


async def chat(request: web.Request) -> web.StreamResponse:
    await request.read()
    if request.headers.get("x-fail"):
        return web.json_response({"error": {"message": "overloaded"}}, status=503)
    resp = web.StreamResponse(headers={"content-type": "text/event-stream", "x-mmgate-endpoint": "pod-a"})
    await resp.prepare(request)
    await asyncio.sleep(FIRST_S)
    for i in range(TOKENS):
        if i:
            await asyncio.sleep(GAP_S)
        await resp.write(_chunk({"choices": [{"index": 0, "delta": {"content": f"t{i}"}}]}))
    usage = {
        "prompt_tokens": 100,
        "completion_tokens": TOKENS,
        "prompt_tokens_details": {"cached_tokens": 64},
    }
    await resp.write(_chunk({"choices": [], "usage": usage}))
    await resp.write(b"data: [DONE]\n\n")
    return resp


METRICS = """# TYPE vllm:prefix_cache_queries counter
vllm:prefix_cache_queries_total{engine="0",model_name="m"} 1000
# TYPE vllm:prefix_cache_hits counter
vllm:prefix_cache_hits_total{engine="0",model_name="m"} 250
# TYPE mmgate_sim:encoder_cache_queries counter
mmgate_sim:encoder_cache_queries_total{engine="0",model_name="m"} 10
# TYPE mmgate_sim:encoder_cache_hits counter
mmgate_sim:encoder_cache_hits_total{engine="0",model_name="m"} 4
"""


async def metrics(_request: web.Request) -> web.Response:
    return web.Response(text=METRICS)


@pytest.fixture
async def server() -> AsyncIterator[str]:
    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_get("/metrics", metrics)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    yield f"http://127.0.0.1:{port}"
    await runner.cleanup()


async def test_measures_ttft_itl_e2e_and_tokens(server: str) -> None:
    ladder = Ladder(rates=(20.0,), duration_s=0.5)
    bodies = workload_bodies(image_reuse(pool=2, requests=10))
    (rung,) = await run_ladder(Target(server, pods=(server,)), "local", ladder, bodies, progress=False)
    assert len(rung.records) == 10
    assert all(r.ok for r in rung.records)
    for r in rung.records:
        assert r.ttft_s is not None and r.e2e_s is not None
        # Lower bounds only: the server sleeps at least this long; a loaded machine adds to it.
        assert r.ttft_s >= FIRST_S
        assert len(r.itl_s) == TOKENS - 1
        # Single gaps are not bounded below: a loaded client can read two tokens in one go.
        assert all(g >= 0 for g in r.itl_s)
        assert r.e2e_s >= FIRST_S + (TOKENS - 1) * GAP_S
        assert r.ttft_s + sum(r.itl_s) <= r.e2e_s + 1e-6  # the pieces of one stream add up
        assert r.output_tokens == TOKENS and r.cached_tokens == 64 and r.endpoint == "pod-a"
        tpot = r.tpot_s
        assert tpot is not None and tpot >= 0
    sends = sorted(r.sent_s for r in rung.records)
    # Open loop: the tenth request leaves on its schedule (0.45 s), not after nine responses
    # (closed loop: at least 9 x 0.18 s); late only by what the machine's load adds.
    assert 9 / 20 - 0.01 <= sends[-1] < 9 * (FIRST_S + (TOKENS - 1) * GAP_S)
    assert rung.span_s >= 0.5
    assert rung.cache.prefix_queries == 0  # counters are deltas over the rung (static page here)


async def test_failures_are_counted_by_type(server: str) -> None:
    ladder = Ladder(rates=(20.0,), duration_s=0.2)
    bodies = workload_bodies(image_reuse(pool=2, requests=4))
    target = Target(server, headers={"x-fail": "1"})
    (rung,) = await run_ladder(target, "failing", ladder, bodies, progress=False)
    assert [r.error for r in rung.records] == ["http_503"] * 4
    with socket.socket() as s:  # a port nobody listens on once this socket closes
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dead = Target(f"http://127.0.0.1:{port}")
    (rung,) = await run_ladder(dead, "dead", ladder, bodies, progress=False)
    assert {r.error for r in rung.records} == {"connect"}


async def test_drain_timeout_cuts_stragglers(server: str) -> None:
    ladder = Ladder(rates=(10.0,), duration_s=0.2, drain_timeout_s=0.03)
    bodies = workload_bodies(image_reuse(pool=2, requests=4))
    (rung,) = await run_ladder(Target(server), "slow", ladder, bodies, progress=False)
    assert {r.error for r in rung.records} == {"timeout"}
    assert all(r.item_id for r in rung.records)


def test_arrivals_and_rates() -> None:
    assert arrival_times(4, 1.0, "constant", 0) == [0, 0.25, 0.5, 0.75]
    poisson = arrival_times(200, 10.0, "poisson", 1)
    assert 1800 < len(poisson) < 2200 and poisson == arrival_times(200, 10.0, "poisson", 1)
    assert parse_rates("5:40:5") == (5, 10, 15, 20, 25, 30, 35, 40)
    assert parse_rates("1,2.5") == (1, 2.5)
    with pytest.raises(ValueError):
        parse_rates("0,1")


def test_cache_counters_from_prometheus_text() -> None:
    c = parse_cache_counters(METRICS)
    assert (c.prefix_queries, c.prefix_hits, c.encoder_queries, c.encoder_hits) == (1000, 250, 10, 4)
    assert c.prefix_hit_ratio == 0.25 and c.encoder_hit_ratio == 0.4
