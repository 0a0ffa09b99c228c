"""The overhead benchmark's parts on loopback: null upstream, load client, report arithmetic."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from mmgate_bench.overhead.bodies import BODIES, body
from mmgate_bench.overhead.client import Client, Job
from mmgate_bench.overhead.envoy_system import Picker
from mmgate_bench.overhead.nullserver import NullConfig, NullServer
from mmgate_bench.overhead.report import markdown, summarize


@pytest.fixture
async def null_ports() -> AsyncIterator[list[int]]:
    server = NullServer(NullConfig(latency_s=0.0, tokens=4))
    ports = await server.start([0, 0])
    yield ports
    await server.close()


async def test_null_server_streams_the_asked_tokens(null_ports: list[int]) -> None:
    request = {"model": "m", "stream": True, "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}
    async with (
        aiohttp.ClientSession() as session,
        session.post(f"http://127.0.0.1:{null_ports[0]}/v1/chat/completions", json=request) as answer,
    ):
        assert answer.status == 200
        assert answer.headers["Content-Type"] == "text/event-stream"
        events = [line for line in (await answer.text()).splitlines() if line.startswith("data: ")]
    assert events[-1] == "data: [DONE]"
    chunks = [json.loads(e[6:]) for e in events[:-1]]
    assert len(chunks) == 5
    assert [c["choices"][0]["finish_reason"] for c in chunks] == [None] * 4 + ["length"]


async def test_null_server_answers_like_vllm(null_ports: list[int]) -> None:
    base = f"http://127.0.0.1:{null_ports[1]}"
    async with aiohttp.ClientSession() as session:
        # A chunked request body (how a router streams a body on) is read in full.
        async def pieces() -> AsyncIterator[bytes]:
            yield b'{"model": "m", "messages": [{"role": "user", '
            yield b'"content": "hi"}]}'

        async with session.post(f"{base}/v1/chat/completions", data=pieces()) as answer:
            completion = await answer.json()
        async with session.get(f"{base}/v1/models") as answer:
            models = await answer.json()
        async with session.get(f"{base}/metrics") as answer:
            metrics = await answer.text()
        async with session.get(f"{base}/nope") as answer:
            missing = answer.status
    assert completion["usage"]["completion_tokens"] == 4
    assert completion["choices"][0]["message"]["content"] == " tok" * 4
    assert models["data"][0]["id"] == "null-model"
    assert 'vllm:num_requests_running{model_name="null-model"} 0.0' in metrics
    assert 'vllm:request_success_total{finished_reason="length",model_name="null-model"} 1.0' in metrics
    assert missing == 404


async def test_client_counts_every_request_in_both_load_shapes(null_ports: list[int], tmp_path: Path) -> None:
    path = tmp_path / "stream.json"
    path.write_bytes(body(BODIES["stream-100"]))
    client = Client()
    closed = await client.run(
        Job(port=null_ports[0], body_file=str(path), concurrency=3, requests=7, duration=30)
    )
    assert (closed["ok"], closed["errors"]) == (7, 0)
    # 100 SSE events plus [DONE] came back for each request.
    assert closed["bytes_in"] > 7 * 100 * len(b"data: ")
    opened = await client.run(
        Job(port=null_ports[0], body_file=str(path), mode="open", rate=200, duration=0.25)
    )
    assert (opened["ok"], opened["errors"]) == (50, 0)
    refused = await client.run(Job(port=1, body_file=str(path), requests=2, duration=0.2))
    assert refused["ok"] == 0 and refused["errors"] > 0


def _cell(
    system: str, body_name: str, latencies: list[float], rps: float, cpu: float | None
) -> dict[str, Any]:
    job = {
        "ok": len(latencies),
        "errors": 0,
        "elapsed_s": 1.0,
        "latencies_ms": latencies,
        "ttfb_ms": latencies,
    }
    throughput = {"ok": int(rps), "errors": 0, "elapsed_s": 1.0}
    return {
        "round": 0,
        "system": system,
        "body": body_name,
        "latency": {**job, "router_cpu_s": cpu and cpu / 2, "upstream_cpu_s": 0.1},
        "throughput": {**throughput, "router_cpu_s": cpu and cpu / 2, "upstream_cpu_s": 0.1},
    }


def test_summary_subtracts_direct_and_compares_with_the_best_peer() -> None:
    raw = {
        "meta": {"started": "s", "finished": "f", "command": "c", "versions": {}, "python": "3"},
        "bodies": {"text": {"bytes": 10, "description": "t"}, "image-3": {"bytes": 10, "description": "i"}},
        "systems": [
            {"name": "direct", "kind": "direct", "status": "ok", "peak_rss_mb": None},
            {"name": "mm", "kind": "mmgate", "status": "ok", "peak_rss_mb": 50.0},
            {"name": "fast", "kind": "peer", "status": "ok", "peak_rss_mb": 20.0},
            {"name": "slow", "kind": "peer", "status": "ok", "peak_rss_mb": 20.0},
        ],
        "cells": [
            _cell("direct", "text", [1.0, 1.0, 2.0], 1000, None),
            _cell("mm", "text", [1.5, 1.5, 3.0], 500, 1.0),
            _cell("fast", "text", [1.2, 1.2, 2.2], 800, 0.5),
            _cell("slow", "text", [1.3, 1.3, 2.3], 400, 0.5),
            _cell("direct", "image-3", [2.0, 2.0, 2.0], 300, None),
            _cell("mm", "image-3", [4.0, 4.0, 4.0], 260, 1.0),
            _cell("fast", "image-3", [6.0, 6.0, 6.0], 100, 1.0),
            _cell("slow", "image-3", [9.0, 9.0, 9.0], 200, 1.0),
        ],
        "sweep": [],
    }
    summary = summarize(raw)
    rows = {(r["system"], r["body"]): r for r in summary["rows"]}
    assert rows["mm", "text"]["added_p50_ms"] == pytest.approx(0.5)
    assert rows["mm", "text"]["added_p99_ms"] == pytest.approx(2.97 - 1.98)  # p99s, interpolated
    assert rows["direct", "text"]["added_p50_ms"] is None
    assert rows["mm", "text"]["cpu_s_per_1k"] == pytest.approx(1000 * 1.0 / (3 + 500))
    ratios = {r["body"]: r for r in summary["ratios"]}
    assert ratios["text"]["best_peer"] == "fast" and ratios["text"]["rps_ratio"] == pytest.approx(500 / 800)
    assert ratios["image-3"]["best_peer"] == "slow" and ratios["image-3"]["rps_ratio"] == pytest.approx(1.3)
    goals = {g["body"]: g for g in summary["goals"]}
    assert goals["text"]["rps_met"] and goals["text"]["added_met"]  # 0.625x >= 0.6x, +0.5 ms <= 1 ms
    assert goals["image-3"]["rps_met"] and goals["image-3"]["added_met"]  # 1.3x, +2 ms
    assert "| mm | 1.50 | 2.97 | +0.50 | +0.99 | 500 |" in markdown(summary)


def test_a_picker_variant_names_its_proxy_configuration_transport_and_processes() -> None:
    one = Picker.parse("original-dst/streamed/lean")
    two = Picker.parse("original-dst/streamed/lean/2")
    assert (one.lb, one.request_body, one.grpc, one.processes) == ("original-dst", "streamed", "lean", 1)
    assert two.processes == 2 and two.argv()[-2:] == ["--picker-workers", "2"]
    for bad in ("original-dst/streamed", "original-dst/streamed/lean/two", "a/b/c/1/2"):
        with pytest.raises(ValueError):
            Picker.parse(bad)
