"""End to end: (d) a pod killed mid-run (SIGKILL of its process) loses no request that had not
started streaming: those are retried on another pod before the client sees a byte."""

from __future__ import annotations

import asyncio
import signal
from dataclasses import dataclass

import aiohttp
import pytest

from mmgate.control.scheduler_picker import SchedulerPicker
from support.processes import mmgate_command, subprocess_env
from support.stack import ENCODER_AFFINITY, chat_body, stack
from support.upstreams import free_port

pytestmark = pytest.mark.slow


@dataclass
class Result:
    endpoint: str = ""
    status: int = 0
    chunks: int = 0
    completed: bool = False
    error: str = ""


async def start_pod_process(port: int) -> asyncio.subprocess.Process:
    proc = await asyncio.create_subprocess_exec(
        *mmgate_command(
            "sim", "--profile", "fast", "--pods", "1", "--base-port", str(port), "--time-scale", "5"
        ),
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
        env=subprocess_env(),
    )
    async with aiohttp.ClientSession() as session:
        for _ in range(300):
            try:
                async with session.get(f"http://127.0.0.1:{port}/health") as resp:
                    if resp.status == 200:
                        return proc
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.05)
    proc.kill()
    raise AssertionError("simulated pod process did not start")


async def test_d_killing_a_pod_loses_no_request_that_had_not_started_streaming() -> None:
    port = free_port()
    proc = await start_pod_process(port)
    victim = f"127.0.0.1:{port}"
    try:
        async with stack(ENCODER_AFFINITY, pods=3, time_scale=5.0, extra_endpoints=[victim]) as s:
            model = s.model
            results: list[Result] = []
            killed = asyncio.Event()

            async def one(k: int) -> None:
                result = Result()
                results.append(result)
                body = chat_body(model, f"tell me a story number {k}", max_tokens=24, stream=True)
                try:
                    async with s.session.post(s.url + "/v1/chat/completions", data=body) as resp:
                        result.status = resp.status
                        result.endpoint = resp.headers.get("x-mmgate-endpoint", "")
                        received = b""
                        async for chunk in resp.content.iter_any():
                            result.chunks += 1
                            received += chunk
                        result.completed = received.endswith(b"data: [DONE]\n\n")
                except aiohttp.ClientError as exc:
                    result.error = type(exc).__name__

            async def client(worker: int) -> None:
                for k in range(10):
                    await one(worker * 100 + k)

            router = s.running.gateway.picker
            assert isinstance(router, SchedulerPicker)

            def waiting_at_victim() -> int:
                """Attempts sent to the victim that have not streamed a byte to their client."""
                state = router.states.get(victim)
                started = state.inflight.requests if state is not None else 0
                streaming = sum(r.endpoint == victim and not r.completed and not r.error for r in results)
                return started - streaming

            async def killer() -> None:
                # Kill while at least one request is on the victim before its first byte: that one
                # must be retried elsewhere, invisibly to its client.
                while (
                    sum(r.endpoint == victim and r.completed for r in results) < 3 or waiting_at_victim() < 1
                ):
                    await asyncio.sleep(0.002)
                proc.send_signal(signal.SIGKILL)
                killed.set()

            kill_task = asyncio.create_task(killer())
            await asyncio.gather(*(client(w) for w in range(8)))
            await asyncio.wait_for(kill_task, timeout=5)
            assert killed.is_set()
            metrics = await (await s.session.get(s.url + "/metrics")).text()
            record = s.running.gateway.data.registry.get(victim)
            assert record is not None and not record.health.healthy  # taken out of rotation

        assert len(results) == 80
        lost = [r for r in results if not r.completed]
        # Only requests already streaming from the killed pod may be cut; everything else completes.
        for r in lost:
            assert r.endpoint == victim and r.status == 200 and r.chunks >= 1, r
        assert len(lost) <= 8  # at most one in-flight stream per client
        assert sum(r.completed and r.endpoint != victim for r in results) >= 60
        # The kill was felt: the request waiting on the victim was retried elsewhere (or, if its
        # first byte won the race with the kill, its stream was cut and counted as lost above).
        retried = f'mmgate_upstream_errors_total{{endpoint="{victim}"' in metrics
        assert retried or lost
        if retried:
            assert 'mmgate_retries_total{reason="' in metrics
    finally:
        if proc.returncode is None:
            proc.kill()
        await proc.wait()
