"""A simulated fleet in its own process, for the HTTP benchmark.

``python -m mmgate_bench.routing.fleet_proc --pods 4 --profile NAME --speedup 10`` starts the pods on
free ports, prints one JSON line ``{"urls": [...]}`` and serves until terminated. ``--roles``
gives each pod its gateway role in order (``encode``, ``prefill``, ``decode``, ``prefill-decode``;
an encode pod runs ``--mm-encoder-only``), ``--engine`` engine settings as JSON. A separate
process keeps the pods' step loops off the load generator's event loop, as real pods would be.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
from collections.abc import Sequence
from typing import Any

from mmgate.sim.fleet import SimFleet
from mmgate.sim.roles import Role
from mmgate.sim.spec import PodSpec

SIM_ROLE = {
    "encode": Role.ENCODE,
    "prefill": Role.PREFILL,
    "decode": Role.DECODE,
    "prefill-decode": Role.BOTH,
}
"""The simulated pod's role for each gateway (llm-d) role label."""


def fleet_of(
    pods: int,
    profile: str,
    speedup: float,
    seed: int,
    roles: Sequence[str] = (),
    engine: dict[str, Any] | None = None,
) -> SimFleet:
    """``pods`` simulated pods; with ``roles``, one per pod in order."""
    common: dict[str, Any] = {
        "profile": profile,
        "time_scale": 1.0 / speedup,
        "seed": seed,
        "engine": engine or {},
    }
    if not roles:
        return SimFleet(pods=pods, **common)
    specs = [PodSpec(name=f"pod-{i}", role=SIM_ROLE[role], **common) for i, role in enumerate(roles)]
    return SimFleet(specs)


async def serve(fleet: SimFleet) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with fleet:
        print(json.dumps({"urls": fleet.urls}), flush=True)
        await stop.wait()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m mmgate_bench.routing.fleet_proc", description=__doc__)
    parser.add_argument("--pods", type=int, default=4)
    parser.add_argument("--profile", default="qwen3-vl-32b-h200-tp2")
    parser.add_argument("--speedup", type=float, default=1.0, help="simulated seconds per wall second")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--roles", default="", help="comma-separated, one per pod: " + ", ".join(SIM_ROLE))
    parser.add_argument("--engine", type=json.loads, default={}, metavar="JSON", help="engine settings")
    args = parser.parse_args()
    roles = [r.strip() for r in args.roles.split(",") if r.strip()]
    if any(r not in SIM_ROLE for r in roles) or (roles and len(roles) != args.pods):
        parser.error(f"--roles: {args.pods} of {', '.join(SIM_ROLE)}")
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(fleet_of(args.pods, args.profile, args.speedup, args.seed, roles, args.engine)))


if __name__ == "__main__":
    main()
