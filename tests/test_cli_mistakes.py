"""Mistakes a new user makes on the command line: one clear line and exit 2, never a traceback."""

from __future__ import annotations

import socket
import subprocess
from collections.abc import Iterator

import pytest

from support.processes import mmgate_command, run_without, subprocess_env


def mmgate(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        mmgate_command(*args), capture_output=True, text=True, env=subprocess_env(), timeout=60
    )


def refused(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    return done.stderr


@pytest.fixture
def busy_port() -> Iterator[int]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def test_demo_time_scale_zero_is_a_usage_error() -> None:
    err = refused(mmgate("demo", "--time-scale", "0", "--port", "0"))
    assert "argument --time-scale: must be greater than 0, got 0" in err


def test_demo_host_that_is_not_an_address() -> None:
    err = refused(mmgate("demo", "--host", "999.1.1.1", "--port", "0", "--pods", "1"))
    assert "host '999.1.1.1' is not an address of this machine" in err
    assert "port" not in err.split("not an address", 1)[0]  # not blamed on the port


@pytest.mark.parametrize(
    ("command", "flag"),
    [
        (["demo", "--pods", "1"], "--port"),
        (["serve", "--endpoints", "127.0.0.1:1"], "--port"),
        (["sidecar", "--admin-port", "0", "--upstream", "http://127.0.0.1:1"], "--port"),
        (["sim", "--duration", "1"], "--base-port"),
    ],
)
def test_a_busy_port_is_named(command: list[str], flag: str, busy_port: int) -> None:
    err = refused(mmgate(*command, flag, str(busy_port)))
    assert f"port {busy_port} is in use" in err and f"choose another with {flag}" in err


def test_cost_document_that_does_not_exist() -> None:
    err = refused(mmgate("cost", "--document", "missing.pdf"))
    assert err.strip() == "mmgate cost: error: --document missing.pdf: no such file"


def test_extproc_help_without_the_grpc_extra() -> None:
    done = run_without(["grpc", "grpc_health", "google"], "extproc", "--help")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: mmgate extproc") and "--print-envoy-config" in done.stdout
    # and what needs grpc still says what to install
    err = refused(run_without(["grpc", "grpc_health", "google"], "extproc", "--endpoints", "127.0.0.1:1"))
    assert "pip install 'mmgate[extproc]'" in err
