"""The null picker behind a real Envoy with llm-d's configuration: every byte reaches the upstream
and the client, and requests alternate over the two upstreams (the ``envoy + null picker`` system
of ``mmgate bench overhead``)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import AsyncIterator

import aiohttp
import pytest

from mmgate_bench.overhead.nullserver import NullConfig, NullServer
from mmgate_bench.processes import free_port
from support.processes import subprocess_env


@pytest.fixture
async def upstream() -> AsyncIterator[NullServer]:
    server = NullServer(NullConfig(latency_s=0.0, tokens=4))
    await server.start([0, 0])
    yield server
    await server.close()


async def _serving(session: aiohttp.ClientSession, url: str, child: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert child.poll() is None, "envoy_system exited"
        try:
            async with session.post(url, json={"model": "m", "messages": []}) as answer:
                if answer.status == 200:
                    return
        except aiohttp.ClientError:
            pass
        await asyncio.sleep(0.2)
    raise AssertionError("Envoy with the null picker did not serve in 60 s")


@pytest.mark.parametrize("grpc", ["null", "null-whole"])
async def test_envoy_with_the_null_picker_passes_every_byte_both_ways(
    upstream: NullServer, grpc: str
) -> None:
    ports = list(upstream.stats)
    port = free_port()
    command = [sys.executable, "-m", "mmgate_bench.overhead.envoy_system", "--port", str(port)]
    command += ["--workers", ",".join(f"127.0.0.1:{p}" for p in ports)]
    command += ["--lb", "original-dst", "--request-body", "streamed", "--grpc", grpc]
    child = subprocess.Popen(command, env=subprocess_env())
    url = f"http://127.0.0.1:{port}/v1/chat/completions"
    try:
        async with aiohttp.ClientSession() as session:
            await _serving(session, url, child)
            before = {p: (s.served, s.prompt_bytes) for p, s in upstream.stats.items()}
            # 1.5 MB: several of Envoy's body messages, each echoed in many answers
            large = json.dumps(
                {"model": "m", "max_tokens": 3, "messages": [{"role": "user", "content": "x" * 1_500_000}]}
            )
            async with session.post(url, data=large, headers={"content-type": "application/json"}) as answer:
                assert answer.status == 200
                usage = (await answer.json())["usage"]
            assert usage["prompt_tokens"] == len(large) // 4  # the upstream got the whole body
            streamed = {
                "model": "m",
                "stream": True,
                "max_tokens": 5,
                "messages": [{"role": "user", "content": "hi"}],
            }
            async with session.post(url, json=streamed) as answer:
                assert answer.status == 200
                events = [line for line in (await answer.text()).splitlines() if line.startswith("data: ")]
            assert len(events) == 6 and events[-1] == "data: [DONE]"
            after = {p: (s.served, s.prompt_bytes) for p, s in upstream.stats.items()}
    finally:
        child.terminate()
        child.wait(timeout=20)
    served = {p: after[p][0] - before[p][0] for p in ports}
    assert sorted(served.values()) == [1, 1]  # one request on each upstream: the picker alternates
    assert sum(after[p][1] - before[p][1] for p in ports) > len(large)
