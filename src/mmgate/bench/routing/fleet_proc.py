"""A simulated fleet in its own process, for the HTTP benchmark.

``python -m mmgate.bench.routing.fleet_proc --pods 4 --profile NAME --speedup 10`` starts the pods on
free ports, prints one JSON line ``{"urls": [...]}`` and serves until terminated. A separate
process keeps the pods' step loops off the load generator's event loop, as real pods would be.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal

from mmgate.sim.fleet import SimFleet


async def serve(pods: int, profile: str, speedup: float, seed: int) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with SimFleet(pods=pods, profile=profile, time_scale=1.0 / speedup, seed=seed) as fleet:
        print(json.dumps({"urls": fleet.urls}), flush=True)
        await stop.wait()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m mmgate.bench.routing.fleet_proc", description=__doc__)
    parser.add_argument("--pods", type=int, default=4)
    parser.add_argument("--profile", default="qwen3-vl-32b-h200-tp2")
    parser.add_argument("--speedup", type=float, default=1.0, help="simulated seconds per wall second")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(args.pods, args.profile, args.speedup, args.seed))


if __name__ == "__main__":
    main()
