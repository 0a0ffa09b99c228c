"""The processes a benchmark starts on loopback: a free port, start, wait until it answers, stop.

The routing (HTTP mode), overhead and soak benchmarks all run routers, fleets and upstreams as
child processes; each is started in its own session so that it and any workers it forks stop as one
group. What they cost is read by :mod:`mmgate_bench.procstat`.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import mmgate
import mmgate_bench
from mmgate_bench.procstat import descendants

# The folders this process imported mmgate and mmgate_bench from (a checkout's ``src`` and
# ``bench/src``, or site-packages), first on a child's PYTHONPATH so it runs the same code.
SRC = Path(mmgate.__file__).resolve().parents[1]
BENCH_SRC = Path(mmgate_bench.__file__).resolve().parents[1]

# Loopback only: never let an http_proxy variable send readiness probes elsewhere.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def child_env() -> dict[str, str]:
    """This environment with :data:`SRC` and :data:`BENCH_SRC` first on PYTHONPATH: a child started
    with ``python -m mmgate`` or ``-m mmgate_bench...`` runs this process's code, not whatever an
    installed copy would give it."""
    env = dict(os.environ)
    first = dict.fromkeys([str(SRC), str(BENCH_SRC)])  # one entry when both are site-packages
    env["PYTHONPATH"] = os.pathsep.join([*first, *([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])])
    return env


def free_port() -> int:
    """An unused loopback port (bound and released: a tiny race, fine on a benchmark machine)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class Managed:
    """A subprocess started in its own session so it (and its workers) can be stopped as a group."""

    name: str
    command: list[str]
    log_path: Path
    env: dict[str, str] | None = None
    process: subprocess.Popen[bytes] | None = None
    _log: IO[bytes] | None = field(default=None, repr=False)

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = self.log_path.open("wb")
        self.process = subprocess.Popen(
            self.command,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=self.env,
            start_new_session=True,
        )

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def tree(self) -> list[int]:
        return descendants(self.pid) if self.alive() else []

    def log_tail(self, lines: int = 8) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        return ""

    def stop(self) -> None:
        if self.process is None:
            return
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=5)
        if self._log is not None:
            self._log.close()


def wait_until_serving(url: str, body: bytes, process: Managed, timeout: float = 60.0) -> str | None:
    """POST ``body`` to ``url`` until it answers 200. None on success, else why it did not."""
    deadline = time.monotonic() + timeout
    last = "no answer"
    while time.monotonic() < deadline:
        if not process.alive():
            return f"exited with code {process.process.returncode if process.process else '?'}"
        request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
        try:
            with _OPENER.open(request, timeout=5) as answer:
                answer.read()
                if answer.status == 200:
                    return None
                last = f"HTTP {answer.status}"
        except urllib.error.HTTPError as exc:
            last = f"HTTP {exc.code}"
        except (OSError, urllib.error.URLError) as exc:
            last = type(exc).__name__
        time.sleep(0.2)
    return f"not serving after {timeout:.0f} s ({last})"
