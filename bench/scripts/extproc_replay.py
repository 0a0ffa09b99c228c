"""The picker's own cost per request, from Envoy's recorded ext_proc bytes replayed in-process.

Timing the picker behind a live Envoy on a shared machine mixes its cost with the machine's load.
This driver separates them in two steps:

``record``: a null upstream, ``mmgate extproc``, and Envoy (one worker, the configuration
``mmgate extproc --print-envoy-config --envoy-lb LB --envoy-request-body BODY`` writes) with a
relay between Envoy and the picker that keeps every read Envoy's side sent, in order and with its
boundaries; ``--requests`` requests of one benchmark body go through Envoy one after the other::

    python bench/scripts/extproc_replay.py record --body image-3 --out image-3.frames

``replay``: builds the gateway the picker builds (the same config, the same two endpoint
addresses, never contacted) and feeds the recorded reads to a fresh :class:`mmgate.http.h2.Connection`
of the lean transport each round, as the event loop would (``data_received`` per read), with
answers written to a transport that only counts bytes. ``--profile`` prints cProfile's top
functions; ``--instructions`` runs the replay under ``valgrind --tool=callgrind`` and reports
instructions per request (callgrind dumps its counters at each ``time.thread_time_ns`` call,
made just before and after the timed loop), which the machine's load does not move::

    python bench/scripts/extproc_replay.py replay image-3.frames --rounds 20
    python bench/scripts/extproc_replay.py replay image-3.frames --instructions
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import http.client
import json
import os
import pickle
import pstats
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
UPSTREAMS = (24101, 24102)
GRPC_PORT, ADMIN_PORT, RELAY_PORT, ENVOY_PORT, ENVOY_ADMIN = 24110, 24111, 24112, 24120, 24121


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), str(ROOT / "bench" / "src")])
    return env


def _wait_http(url: str, timeout: float = 30.0) -> None:
    import urllib.request

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=1) as resp:
                if resp.status == 200:
                    return
        except OSError:
            time.sleep(0.1)
    raise SystemExit(f"{url} did not answer")


async def _relay(reads: list[list[bytes]], stop: asyncio.Event) -> None:
    async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter, keep: list[bytes] | None) -> None:
        while data := await src.read(1 << 20):
            if keep is not None:
                keep.append(data)
            dst.write(data)
            await dst.drain()
        dst.close()

    async def on_client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", GRPC_PORT)
        keep: list[bytes] = []
        reads.append(keep)
        await asyncio.gather(pipe(reader, up_writer, keep), pipe(up_reader, writer, None))

    server = await asyncio.start_server(on_client, "127.0.0.1", RELAY_PORT)
    async with server:
        await stop.wait()


def record(args: argparse.Namespace) -> int:
    sys.path[:0] = [str(ROOT / "src"), str(ROOT / "bench" / "src")]
    from mmgate.gateway.extproc.envoy_config import render
    from mmgate_bench.overhead.bodies import BODIES, body
    from mmgate_bench.overhead.envoy_system import envoy_binary

    data = body(BODIES[args.body])
    endpoints = [f"127.0.0.1:{port}" for port in UPSTREAMS]
    children: list[subprocess.Popen[bytes]] = []
    workdir = Path(tempfile.mkdtemp(prefix="extproc-replay-"))
    py = sys.executable
    try:
        ports = [a for port in UPSTREAMS for a in ("--port", str(port))]
        children.append(subprocess.Popen([py, "-m", "mmgate_bench.overhead.nullserver", *ports], env=_env()))
        children.append(
            subprocess.Popen(
                [py, "-m", "mmgate", "extproc", "--config", args.config, "--endpoints", ",".join(endpoints),
                 "--port", str(GRPC_PORT), "--admin-port", str(ADMIN_PORT), "--no-access-log",
                 "--log-level", "warning"],
                env=_env(),
            )
        )  # fmt: skip
        _wait_http(f"http://127.0.0.1:{ADMIN_PORT}/ready")
        text = render(
            listen_port=ENVOY_PORT, listen_host="127.0.0.1", extproc=f"127.0.0.1:{RELAY_PORT}",
            admin_port=ENVOY_ADMIN, endpoints=endpoints, lb=args.lb, request_body=args.request_body,
        )  # fmt: skip
        (workdir / "envoy.yaml").write_text(text)
        children.append(
            subprocess.Popen(
                [envoy_binary(), "-c", str(workdir / "envoy.yaml"), "--concurrency", "1",
                 "--disable-hot-restart", "--base-id", str(os.getpid()), "--log-level", "error"]
            )
        )  # fmt: skip
        _wait_http(f"http://127.0.0.1:{ENVOY_ADMIN}/ready")
        reads: list[list[bytes]] = []

        async def drive() -> None:
            stop = asyncio.Event()
            relay = asyncio.create_task(_relay(reads, stop))
            await asyncio.sleep(0.2)

            def requests() -> None:
                conn = http.client.HTTPConnection("127.0.0.1", ENVOY_PORT, timeout=10)
                for _ in range(args.requests):
                    conn.request("POST", "/v1/chat/completions", data, {"Content-Type": "application/json"})
                    resp = conn.getresponse()
                    resp.read()
                    if resp.status != 200:
                        raise SystemExit(f"status {resp.status}")
                conn.close()

            await asyncio.to_thread(requests)
            await asyncio.sleep(0.3)
            stop.set()
            relay.cancel()

        asyncio.run(drive())
        doc = {"body": args.body, "requests": args.requests, "config": args.config, "lb": args.lb,
               "request_body": args.request_body, "endpoints": endpoints, "reads": reads}  # fmt: skip
        Path(args.out).write_bytes(pickle.dumps(doc))
        sizes = [len(r) for r in reads]
        print(f"recorded {args.requests} requests: {len(reads)} connection(s), reads per connection {sizes}")
        return 0
    finally:
        for child in reversed(children):
            child.terminate()
        for child in children:
            child.wait(timeout=10)


class _Sink:
    """A transport that keeps nothing: counts what the connection writes."""

    def __init__(self) -> None:
        self.written = 0

    def write(self, data: Any) -> None:
        self.written += len(data)

    def writelines(self, parts: Any) -> None:
        for part in parts:
            self.written += len(part)

    def is_closing(self) -> bool:
        return False

    def close(self) -> None:
        pass

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default


def replay(args: argparse.Namespace) -> int:
    import msgspec

    from mmgate.config import load_config
    from mmgate.datalayer.endpoints import parse_endpoint
    from mmgate.gateway.app import build_gateway
    from mmgate.gateway.extproc import lean

    doc = pickle.loads(Path(args.frames).read_bytes())
    config = load_config(doc["config"])
    section = msgspec.structs.replace(config.mmgate, endpoints=[], endpointsFile=None, accessLog=False)
    gateway = build_gateway(msgspec.structs.replace(config, mmgate=section))
    for text in doc["endpoints"]:
        gateway.data.registry.add(parse_endpoint(text))
    factory = lean.services(gateway, {}, None)
    reads: list[bytes] = [r for conn in doc["reads"] for r in conn]
    per_round = doc["requests"]
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)

    def one_round() -> int:
        sink = _Sink()
        for conn_reads in doc["reads"]:
            conn = factory()
            conn.connection_made(sink)  # type: ignore[arg-type]
            for data in conn_reads:
                conn.data_received(data)
            conn.connection_lost(None)
        return sink.written

    written = one_round()  # warm-up
    print(
        f"{len(reads)} reads, {sum(map(len, reads))} bytes in, {written} bytes out per round of {per_round}"
    )
    if args.instructions:
        time.thread_time_ns()
        for _ in range(args.rounds):
            one_round()
        time.thread_time_ns()
        return 0
    if args.profile:
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(args.rounds):
            one_round()
        prof.disable()
        pstats.Stats(prof).sort_stats(args.sort).print_stats(args.top)
        return 0
    times = []
    for _ in range(args.rounds):
        start = time.process_time()
        one_round()
        times.append((time.process_time() - start) / per_round * 1000)
    times.sort()
    print(json.dumps({"ms_per_request_median": times[len(times) // 2], "min": times[0]}))
    return 0


def instructions(args: argparse.Namespace) -> int:
    out = Path(tempfile.mkdtemp(prefix="extproc-cg-")) / "cg.out"
    command = [
        sys.executable,
        __file__,
        "replay",
        args.frames,
        "--rounds",
        str(args.rounds),
        "--instructions",
    ]
    subprocess.run(
        ["valgrind", "--tool=callgrind", "--dump-before=time_thread_time_ns", f"--callgrind-out-file={out}",
         *command],
        check=True, env=_env(), stderr=subprocess.DEVNULL,
    )  # fmt: skip
    doc = pickle.loads(Path(args.frames).read_bytes())
    dumps = sorted(out.parent.glob("cg.out.*"), key=lambda p: int(p.suffix[1:]))
    total = 0
    for line in dumps[-1].read_text().splitlines():
        if line.startswith("summary:") or line.startswith("totals:"):
            total = int(line.split()[1])
    per = total / (args.rounds * doc["requests"])
    print(json.dumps({"instructions_per_request": round(per), "dump": str(dumps[-1])}))
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)
    rec = sub.add_parser("record")
    rec.add_argument("--body", default="text")
    rec.add_argument("--requests", type=int, default=20)
    rec.add_argument("--config", default=str(ROOT / "examples" / "round-robin.yaml"))
    rec.add_argument("--lb", default="original-dst")
    rec.add_argument("--request-body", default="streamed")
    rec.add_argument("--out", required=True)
    rep = sub.add_parser("replay")
    rep.add_argument("frames")
    rep.add_argument("--rounds", type=int, default=20)
    rep.add_argument("--profile", action="store_true")
    rep.add_argument("--sort", default="tottime")
    rep.add_argument("--top", type=int, default=30)
    rep.add_argument("--instructions", action="store_true", help=argparse.SUPPRESS)
    cnt = sub.add_parser("instructions")
    cnt.add_argument("frames")
    cnt.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    if args.command == "record":
        return record(args)
    if args.command == "replay":
        return replay(args)
    if args.command == "instructions":
        return instructions(args)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
