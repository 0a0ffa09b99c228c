"""Three ``mmgate extproc`` processes behind one real Envoy, stopped the ways processes stop: a
SIGTERM under steady requests (the drain: NOT_SERVING while still serving, then GOAWAY and a
grace for open streams) costs no request; after a SIGKILL, every request that starts once Envoy's
health checks have marked the process down is served by a live one."""

from __future__ import annotations

import asyncio
import shutil
import signal
import tempfile
from pathlib import Path

import aiohttp
import pytest

from mmgate.gateway.extproc.envoy_config import render
from mmgate.sim.fleet import SimFleet
from support.envoy import picker_health, spawn_envoy, stop_envoy, wait_envoy_ready
from support.processes import ServerProcess
from support.stack import ENCODER_AFFINITY, chat_body, server_counter
from support.upstreams import free_port

pytestmark = pytest.mark.slow


def picker_args(config: Path, endpoints: list[str], grpc: int, admin: int) -> list[str]:
    """``mmgate extproc`` on ``grpc`` with a 1 s drain and 5 s grace (the defaults fit Envoy's
    1 s checks; this Envoy checks every 0.2 s)."""
    return [
        "extproc", "--config", str(config), "--endpoints", ",".join(endpoints),
        "--port", str(grpc), "--admin-port", str(admin), "--no-access-log",
        "--drain-seconds", "1", "--grace-seconds", "5",
    ]  # fmt: skip


async def test_picker_processes_stopped_and_killed_behind_one_envoy() -> None:
    fleet = SimFleet(pods=2, profile="fast")
    await fleet.start()
    workdir = Path(tempfile.mkdtemp(prefix="mmgate-pickers-"))
    (workdir / "picker.yaml").write_text(ENCODER_AFFINITY)
    grpc_ports, admin_ports = [free_port() for _ in range(3)], [free_port() for _ in range(3)]
    pickers = [
        ServerProcess(
            picker_args(workdir / "picker.yaml", fleet.urls, grpc, admin), admin, ready_path="/ready"
        )
        for grpc, admin in zip(grpc_ports, admin_ports, strict=True)
    ]
    envoy_port, envoy_admin = free_port(), free_port()
    (workdir / "envoy.yaml").write_text(
        render(
            listen_port=envoy_port,
            listen_host="127.0.0.1",
            admin_port=envoy_admin,
            extproc=[f"127.0.0.1:{port}" for port in grpc_ports],
            picker_health_interval_s=0.2,
            lb="original-dst",
        )
    )
    envoy = None
    session = aiohttp.ClientSession()
    try:
        for picker in pickers:
            await picker.ready(session)
        envoy = spawn_envoy(workdir / "envoy.yaml", workdir / "envoy.log", envoy_port)
        await wait_envoy_ready(session, envoy_admin, envoy, workdir / "envoy.log")
        for port in grpc_ports:
            await picker_health(session, envoy_admin, port, down=False)
        model = fleet.pods[0].model

        async def post(text: str) -> int:
            body = chat_body(model, text)
            async with session.post(f"http://127.0.0.1:{envoy_port}/v1/chat/completions", data=body) as resp:
                await resp.read()
                return resp.status

        statuses: list[int] = []
        stopping = asyncio.Event()

        async def client(k: int) -> None:
            i = 0
            while not stopping.is_set():
                statuses.append(await post(f"Client {k} asks {i}"))
                i += 1

        clients = [asyncio.create_task(client(k)) for k in range(4)]
        await asyncio.sleep(0.5)
        before_term = len(statuses)
        pickers[0].process.send_signal(signal.SIGTERM)
        assert await asyncio.to_thread(pickers[0].process.wait, 30) == 0
        after_term = len(statuses)
        await asyncio.sleep(0.3)
        stopping.set()
        await asyncio.gather(*clients)
        assert 0 < before_term < after_term < len(statuses)  # requests before, during and after
        assert statuses == [200] * len(statuses)

        pickers[1].process.kill()  # SIGKILL: no drain, its connections drop under their streams
        await picker_health(session, envoy_admin, grpc_ports[1], down=True)
        served_before = await server_counter(session, pickers[2].url, "mmgate_requests_total")
        replies = await asyncio.gather(*(post(f"After the kill {i}") for i in range(24)))
        assert replies == [200] * 24
        assert await server_counter(session, pickers[2].url, "mmgate_requests_total") - served_before == 24
    finally:
        await session.close()
        if envoy is not None:
            stop_envoy([envoy])
        for picker in pickers:
            picker.stop()
        await fleet.stop()
        shutil.rmtree(workdir, ignore_errors=True)
