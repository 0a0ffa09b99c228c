"""HTTP mode: real processes on loopback. For each system, a fresh simulated fleet (so no system
inherits another's warm caches), the router in front of it (``mmgate serve`` with the system's
config, or a peer router from the ``make peers`` environment), and the load generator.

Pods can run time-scaled (``speedup``: simulated seconds per wall second) so that a ladder meant
for minutes runs in seconds; the load generator scales rates and times to match and reports in
simulated seconds, the unit the discrete-event mode reports in.
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mmgate.sim.profiles import load_profile
from mmgate_bench.processes import SRC, Managed, child_env, free_port, wait_until_serving
from mmgate_bench.routing.loadgen import Target, raw_bodies, run_ladder, workload_bodies
from mmgate_bench.routing.records import Ladder, RungResult
from mmgate_bench.routing.systems import System
from mmgate_bench.workloads.media import MediaCache
from mmgate_bench.workloads.synthetic import DEFAULT_MODEL, RawItem, Workload


def probe_request(model: str) -> bytes:
    """A one-token request that proves the router can reach a pod."""
    return json.dumps(
        {"model": model, "messages": [{"role": "user", "content": "ping"}], "max_tokens": 1}
    ).encode()


@dataclass(frozen=True, slots=True)
class HttpOptions:
    profile: str = "qwen3-vl-32b-h200-tp2"
    pods: int = 4
    speedup: float = 1.0
    url: str | None = None  # benchmark an external URL instead of starting anything
    seed: int = 0
    logs: Path | None = None
    media_cache: int = 4096  # distinct encoded media kept in memory (a 720p JPEG is ~270 KB as base64)
    roles: tuple[str, ...] = ()  # each pod's gateway role (fleet_proc --roles); empty: none
    engine: dict[str, Any] = field(default_factory=dict)  # engine settings of every pod


def start_fleet(opts: HttpOptions, logs: Path) -> tuple[Managed, list[str]]:
    """A fleet process; returns it and its pod URLs once it has printed them."""
    cmd = [sys.executable, "-m", "mmgate_bench.routing.fleet_proc", "--pods", str(opts.pods),
           "--profile", opts.profile, "--speedup", str(opts.speedup), "--seed", str(opts.seed)]  # fmt: skip
    if opts.roles:
        cmd += ["--roles", ",".join(opts.roles)]
    if opts.engine:
        cmd += ["--engine", json.dumps(opts.engine)]
    fleet = Managed("fleet", cmd, logs / "fleet.log", env=child_env())
    fleet.start()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        for line in fleet.log_path.read_text(errors="replace").splitlines():
            if line.startswith('{"urls"'):
                return fleet, list(json.loads(line)["urls"])
        if not fleet.alive():
            break
        time.sleep(0.1)
    fleet.stop()
    raise RuntimeError(f"simulated fleet did not start:\n{fleet.log_tail()}")


def start_router(
    system: System, urls: Sequence[str], logs: Path, model: str, *, access_log: bool = False
) -> tuple[Managed | None, str, str]:
    """The system's router on a free port: (process or None when skipped, base URL, note). No
    ``urls``: an mmgate config lists its endpoints itself (with their roles). ``access_log``: an
    mmgate router logs one line per request to its log file (``router.log_path``)."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    if system.config is not None:
        listed = ["--endpoints", ",".join(urls)] if urls else []
        quiet = [] if access_log else ["--no-access-log"]
        cmd = [sys.executable, "-m", "mmgate", "serve", "--config", str(system.config), *listed,
               "--host", "127.0.0.1", "--port", str(port), *quiet,
               "--log-level", "info" if access_log else "warning"]  # fmt: skip
        env = child_env()
    else:
        from mmgate_bench.overhead.peers import PEERS, find_peers_python, installed_versions

        python = find_peers_python(roots=[SRC.parent])
        if python is None:
            return None, base, f"skipped {system.name}: no peers environment (run `make peers`)"
        if system.peer not in installed_versions(python):
            return (
                None,
                base,
                f"skipped {system.name}: {system.peer} is not installed in {python.parent.parent}",
            )
        peer = next(p for p in PEERS if p.package == system.peer)
        cmd = peer.command(
            python, port=port, metrics_port=free_port(), workers=urls, policy=system.policy or ""
        )
        env = None
    router = Managed(system.name, cmd, logs / f"{system.name.replace(':', '_')}.log", env=env)
    router.start()
    why = wait_until_serving(base + "/v1/chat/completions", probe_request(model), router, timeout=60)
    if why is not None:
        tail = router.log_tail()
        router.stop()
        return None, base, f"skipped {system.name}: router {why}\n{tail}"
    return router, base, ""


DECODE_SIDE = ("prefill-decode", "decode")
"""The roles a routing sidecar sits in front of (the pods that serve the client's answer)."""


def start_sidecars(
    urls: Sequence[str], roles: Sequence[str], logs: Path, model: str
) -> tuple[list[Managed], list[str], list[str]]:
    """An ``mmgate sidecar`` process in front of each decode-side pod (llm-d's layout: the sidecar
    beside the model server runs the encode and prefill legs), allowed to contact the fleet's
    encode and prefill pods only. Returns the sidecars, the URLs the gateway lists (a sidecar's
    in place of its pod's) and the sidecars' admin URLs (their ``/metrics``). Raises
    ``RuntimeError`` naming the sidecar that does not serve (those started are stopped)."""
    stage_hosts = [u.split("://", 1)[1] for u, r in zip(urls, roles, strict=True) if r not in DECODE_SIDE]
    cars: list[Managed] = []
    listed: list[str] = []
    admin: list[str] = []
    try:
        for i, (url, role) in enumerate(zip(urls, roles, strict=True)):
            if role not in DECODE_SIDE:
                listed.append(url)
                continue
            port, admin_port = free_port(), free_port()
            cmd = [sys.executable, "-m", "mmgate", "sidecar", "--host", "127.0.0.1", "--port", str(port),
                   "--admin-port", str(admin_port), "--upstream", url, "--allow", ",".join(stage_hosts),
                   "--log-level", "warning"]  # fmt: skip
            car = Managed(f"sidecar-{i}", cmd, logs / f"sidecar-{i}.log", env=child_env())
            car.start()
            cars.append(car)
            base = f"http://127.0.0.1:{port}"
            why = wait_until_serving(base + "/v1/chat/completions", probe_request(model), car)
            if why is not None:
                raise RuntimeError(f"sidecar in front of {url} {why}\n{car.log_tail()}")
            listed.append(base)
            admin.append(f"http://127.0.0.1:{admin_port}")
    except BaseException:
        for car in cars:
            car.stop()
        raise
    return cars, listed, admin


def prerender(workload: Workload, media: MediaCache, log: Callable[[str], None]) -> None:
    """Encode every distinct image before the first rung, when they all fit the cache, so the
    client spends no time rendering during a rung (and every system meets the same bytes)."""
    distinct = {m.key: m for item in workload.items for m in item.media}
    if len(distinct) > media.capacity:
        log(f"{len(distinct)} distinct media exceed the cache ({media.capacity}); rendering on demand")
        return
    started = time.perf_counter()
    for spec in distinct.values():
        media.b64(spec)
    log(f"rendered {len(distinct)} distinct media in {time.perf_counter() - started:.1f} s")


def run_http(
    workload: Workload,
    systems: Sequence[System],
    ladder: Ladder,
    opts: HttpOptions,
    *,
    replay: Sequence[RawItem] | None = None,
    progress: bool = True,
    log: Callable[[str], None] = print,
) -> list[RungResult]:
    """Every system in turn, each on a fresh fleet; peers that are absent are skipped with a note."""

    media = MediaCache(capacity=opts.media_cache)

    def bodies() -> Iterator[tuple[str, bytes]]:
        if replay is not None:
            return raw_bodies(replay)
        return workload_bodies(workload, model=model, media=media)

    if opts.url is not None:
        model = DEFAULT_MODEL
        target = Target(opts.url.rstrip("/"))
        return asyncio.run(run_ladder(target, "external", ladder, bodies(), progress=progress))
    profile = load_profile(opts.profile)
    model = profile.model or profile.name
    if replay is None:
        prerender(workload, media, log)
    results: list[RungResult] = []
    with tempfile.TemporaryDirectory(prefix="mmgate-bench-") as tmp:
        logs = opts.logs or Path(tmp)
        for system in systems:
            fleet, urls = start_fleet(opts, logs)
            router: Managed | None = None
            try:
                router, base, note = start_router(system, urls, logs, model)
                if router is None:
                    log(note)
                    continue
                target = Target(base, pods=tuple(urls))
                results += asyncio.run(
                    run_ladder(target, system.name, ladder, bodies(), speedup=opts.speedup, progress=progress)
                )
            finally:
                if router is not None:
                    router.stop()
                fleet.stop()
    return results
