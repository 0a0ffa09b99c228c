"""Processes of the overhead benchmark: start, wait until they answer, account CPU and memory, stop.

CPU time and peak memory are read from ``/proc`` (no psutil): ``utime + stime`` of
``/proc/PID/stat`` and ``VmHWM`` of ``/proc/PID/status``, summed over the process and its
descendants, so a router that forks workers is charged for all of them.
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
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
# Loopback only: never let an http_proxy variable send readiness probes elsewhere.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def free_port() -> int:
    """An unused loopback port (bound and released: a tiny race, fine on a benchmark machine)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _stat_fields(pid: int) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name may hold spaces and parentheses: fields start after the last ')'.
    return raw[raw.rfind(")") + 2 :].split()


def descendants(pid: int) -> list[int]:
    """``pid`` and every live process below it."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        fields = _stat_fields(int(entry))
        if fields:
            children.setdefault(int(fields[1]), []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        todo.extend(children.get(current, ()))
    return found


def cpu_seconds(pids: Sequence[int]) -> float:
    """User + system CPU seconds consumed so far by these processes (and their reaped children)."""
    total = 0
    for pid in pids:
        fields = _stat_fields(pid)
        if fields:
            # utime, stime, cutime, cstime are fields 14-17 of stat; index 0 here is field 3.
            total += sum(int(v) for v in fields[11:15])
    return total / TICKS


def peak_rss_mb(pids: Sequence[int]) -> float:
    """Sum of each process's peak resident set (VmHWM), in MiB."""
    total_kb = 0
    for pid in pids:
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    total_kb += int(line.split()[1])
    return total_kb / 1024


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
