"""vLLM's per-request phase histograms and the chunked-mm-input flag, through real HTTP on loopback."""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from mmgate.modelserver.metrics import E2E_BUCKETS, ITL_BUCKETS
from mmgate.sim.cli import add_arguments, specs_from_args
from mmgate.sim.faults import FaultSettings
from mmgate.sim.fleet import SimFleet
from mmgate.sim.profiles import load_profile
from support.bodies import data_uri
from support.stack import png

# The five histograms vLLM observes when a request finishes, with its bucket sets.
PHASES = {
    "vllm:request_queue_time_seconds": E2E_BUCKETS,
    "vllm:request_prefill_time_seconds": E2E_BUCKETS,
    "vllm:request_decode_time_seconds": E2E_BUCKETS,
    "vllm:request_inference_time_seconds": E2E_BUCKETS,
    "vllm:request_time_per_output_token_seconds": ITL_BUCKETS,
}
# vLLM's request_latency_buckets and time-per-output-token buckets (vllm/v1/metrics/loggers.py).
VLLM_REQUEST_LATENCY = [0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0,
                        60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0]  # fmt: skip
VLLM_TPOT = [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
             20.0, 40.0, 80.0]  # fmt: skip


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as s:
        yield s


async def scrape(http: aiohttp.ClientSession, url: str) -> dict[str, Any]:
    async with http.get(url + "/metrics") as resp:
        assert resp.status == 200
        return {f.name: f for f in text_string_to_metric_families(await resp.text())}


def totals(family: Any) -> tuple[float, float]:
    """(_sum, _count) of a histogram family."""
    values = {s.name.rsplit("_", 1)[-1]: s.value for s in family.samples if "le" not in s.labels}
    return values["sum"], values["count"]


async def post(http: aiohttp.ClientSession, url: str, body: dict[str, Any]) -> dict[str, Any]:
    async with http.post(url + "/v1/chat/completions", json=body) as resp:
        assert resp.status == 200
        doc: dict[str, Any] = await resp.json()
        return doc


async def waiting(http: aiohttp.ClientSession, url: str, n: int) -> None:
    """Until the pod's engine holds ``n`` requests in its waiting queue."""
    while True:
        gauge = (await scrape(http, url))["vllm:num_requests_waiting"]
        if gauge.samples[0].value >= n:
            return
        await asyncio.sleep(0.01)


async def test_phase_histograms_follow_vllm_names_buckets_and_boundaries(http: aiohttp.ClientSession) -> None:
    tokens = 12
    # One seat on a stalled pod: both requests are queued (the long one first: vLLM serves FCFS)
    # before any step runs, so the one-token request waits out the whole of the long one's
    # inference. The pod runs in this event loop, so its clock is the loop's.
    stalled = FaultSettings(stalled=True)
    async with SimFleet(pods=1, profile="fast", engine={"max_num_seqs": 1}, faults=stalled) as fleet:
        url = fleet.urls[0]
        before = await scrape(http, url)
        assert all(totals(before[name]) == (0.0, 0.0) for name in PHASES)
        sent = []
        for i, max_tokens in enumerate((tokens, 1)):
            body = {"model": "test", "messages": [{"role": "user", "content": f"question {i}"}],
                    "max_tokens": max_tokens, "ignore_eos": True}  # fmt: skip
            sent.append(asyncio.create_task(post(http, url, body)))
            await waiting(http, url, i + 1)
        loop = asyncio.get_running_loop()
        queued_by = loop.time()  # both are in the waiting queue by now ...
        await asyncio.sleep(0.05)
        held = loop.time() - queued_by  # ... and neither is scheduled before the stall is lifted
        async with http.post(url + "/admin/faults", json={"stalled": False}) as resp:
            assert resp.status == 200
        await asyncio.gather(*sent)
        families = await scrape(http, url)

    for name, bounds in PHASES.items():
        family = families[name]
        assert family.type == "histogram", name
        buckets = [s for s in family.samples if "le" in s.labels]
        assert [float(s.labels["le"]) for s in buckets[:-1]] == list(bounds), name
        assert buckets[-1].labels["le"] == "+Inf"
        assert buckets[0].labels["model_name"] == "test" and buckets[0].labels["engine"] == "0"
        assert totals(family)[1] == 2, name
    assert list(E2E_BUCKETS) == VLLM_REQUEST_LATENCY and list(ITL_BUCKETS) == VLLM_TPOT

    queue, _ = totals(families["vllm:request_queue_time_seconds"])
    prefill, _ = totals(families["vllm:request_prefill_time_seconds"])
    decode, _ = totals(families["vllm:request_decode_time_seconds"])
    inference, _ = totals(families["vllm:request_inference_time_seconds"])
    tpot, _ = totals(families["vllm:request_time_per_output_token_seconds"])
    ttft, _ = totals(families["vllm:time_to_first_token_seconds"])
    e2e, _ = totals(families["vllm:e2e_request_latency_seconds"])
    assert decode > 0 and prefill > 0
    assert inference == pytest.approx(prefill + decode)  # scheduled → first → last token
    # the one-token request has no decode (its only token is the prefill's) and a TPOT of 0
    assert tpot == pytest.approx(decode / (tokens - 1))
    # both queued through ``held``; the second also through the first one's whole inference
    assert queue >= 2 * held + decode - 1e-9
    assert ttft >= queue + prefill - 1e-9  # arrival (before preprocessing) <= queued
    assert e2e >= queue + inference - 1e-9


def _cli_specs(*flags: str) -> Any:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return specs_from_args(parser.parse_args(["--profile", "fast", "--base-port", "0", *flags]))


async def _busy_seconds(http: aiohttp.ClientSession, *flags: str) -> float:
    """Simulated engine seconds one image request costs on a pod started with these CLI flags."""
    image = data_uri(png(0, (448, 448)))
    content = [
        {"type": "text", "text": "a" * 400},  # ~100 tokens, then the image (~200 tokens), then ~150
        {"type": "image_url", "image_url": {"url": image}},
        {"type": "text", "text": "b" * 600},
    ]
    body = {
        "model": "test",
        "messages": [{"role": "user", "content": content}],
        "max_tokens": 2,
        "ignore_eos": True,
    }
    async with SimFleet(_cli_specs("--max-num-batched-tokens", "250", *flags)) as fleet:
        doc = await post(http, fleet.urls[0], body)
        assert 400 < doc["usage"]["prompt_tokens"] <= 500  # two chunks of 250 when an image may be split
        families = await scrape(http, fleet.urls[0])
    return sum(s.value for s in families["mmgate_sim:busy_sim_seconds"].samples)


async def test_disable_chunked_mm_input_flag_keeps_the_image_in_one_chunk(
    http: aiohttp.ClientSession,
) -> None:
    assert _cli_specs("--disable-chunked-mm-input")[0].engine == {"disable_chunked_mm_input": True}
    assert _cli_specs()[0].engine == {}
    split = await _busy_seconds(http)
    whole = await _busy_seconds(http, "--disable-chunked-mm-input")
    again = await _busy_seconds(http, "--no-disable-chunked-mm-input")
    # Chunks of 250 cut the image in two: 2 prefill steps. Whole, the first chunk stops before the
    # image, so prefill takes one more step: exactly one more step's fixed cost (no timing noise).
    step = load_profile("fast").step
    assert whole - split == pytest.approx((step.base_ms + step.prefill_fixed_ms) / 1000)
    assert again == pytest.approx(split)
