"""``mmgate serve --workers N``: N processes serve one port; the parent supervises them."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.request
from collections.abc import Iterator

import pytest

from support.processes import REPO, mmgate_command, subprocess_env
from support.upstreams import free_port

BODY = json.dumps({"model": "null-model", "messages": [{"role": "user", "content": "hi"}]}).encode()


def _ps(*selection: str) -> list[str]:
    """``ps`` rows of ``pid,stat`` for the selection (procps: ``--ppid P`` or ``-p P``)."""
    done = subprocess.run(["ps", "-o", "pid=,stat=", *selection], capture_output=True, text=True)
    return done.stdout.split("\n")[:-1]


def children(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (the gateway's forked workers)."""
    return sorted(int(row.split()[0]) for row in _ps("--ppid", str(pid)))


def is_running(pid: int) -> bool:
    """True while ``pid`` exists and has not exited (a zombie awaiting its reaper, state Z, has)."""
    return any(not row.split()[1].startswith("Z") for row in _ps("-p", str(pid)))


def _gone(pid: int, timeout: float = 30.0) -> bool:
    """True once ``pid`` has exited (no longer listed, or a zombie awaiting its reaper)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not is_running(pid):
            return True
        time.sleep(0.1)
    return False


def _post(port: int) -> int:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/chat/completions",
        data=BODY,
        headers={"Content-Type": "application/json"},
    )
    with opener.open(request, timeout=30) as answer:
        answer.read()
        return int(answer.status)


@pytest.fixture
def upstream_port() -> Iterator[int]:
    """A simulated model server serving ``null-model`` (``mmgate sim``), listening once it has
    printed its fleet."""
    port = free_port()
    command = mmgate_command("sim", "--profile", "fast", "--pods", "1", "--base-port", str(port))
    command += ["--model", "null-model", "--json"]
    process = subprocess.Popen(command, env=subprocess_env(), stdout=subprocess.PIPE)
    assert process.stdout is not None
    while process.stdout.readline().rstrip() not in (b"]", b""):  # the fleet's JSON: listening
        pass
    yield port
    process.terminate()
    process.wait(timeout=10)


def _serve(port: int, upstream: int, workers: int) -> subprocess.Popen[bytes]:
    config = str(REPO / "examples" / "round-robin.yaml")
    command = mmgate_command(
        "serve", "--config", config, "--port", str(port), "--endpoints", f"127.0.0.1:{upstream}"
    )
    command += ["--workers", str(workers), "--no-access-log", "--log-level", "warning"]
    return subprocess.Popen(command, env=subprocess_env(), stderr=subprocess.PIPE)


def _wait_serving(port: int, process: subprocess.Popen[bytes]) -> None:
    # Liveness bounds, not speed: two workers importing the gateway on a loaded 2-core
    # machine can take tens of seconds before the first answers.
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        assert process.poll() is None, process.stderr.read().decode() if process.stderr else ""
        try:
            if _post(port) == 200:
                return
        except OSError:
            time.sleep(0.1)
    raise AssertionError("gateway workers never answered")


def test_workers_share_the_port_and_stop_together(upstream_port: int) -> None:
    port = free_port()
    gateway = _serve(port, upstream_port, workers=2)
    try:
        _wait_serving(port, gateway)
        workers = children(gateway.pid)
        assert len(workers) == 2
        # Every worker listens: new connections are spread by the kernel, all of them answered.
        assert [_post(port) for _ in range(20)] == [200] * 20
        gateway.send_signal(signal.SIGTERM)
        assert gateway.wait(timeout=60) == 0
        assert all(_gone(pid) for pid in workers)
    finally:
        if gateway.poll() is None:
            gateway.kill()
            gateway.wait()


def test_a_dead_worker_takes_the_gateway_down(upstream_port: int) -> None:
    port = free_port()
    gateway = _serve(port, upstream_port, workers=2)
    try:
        _wait_serving(port, gateway)
        first, second = children(gateway.pid)
        os.kill(first, signal.SIGKILL)
        assert gateway.wait(timeout=60) != 0  # the supervisor restarts all of it, not half
        assert _gone(second)
    finally:
        if gateway.poll() is None:
            gateway.kill()
            gateway.wait()
