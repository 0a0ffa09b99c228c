"""``mmgate extproc --workers N``: N picker processes serve one gRPC port (SO_REUSEPORT); the
parent supervises them, as ``mmgate serve --workers`` does."""

from __future__ import annotations

import signal
import subprocess
import time

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from support.processes import REPO, mmgate_command, subprocess_env
from support.upstreams import free_port

pytestmark = pytest.mark.slow


def _children(pid: int) -> list[int]:
    done = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True)
    return sorted(int(row) for row in done.stdout.split())


def _liveness(port: int) -> int:
    """One ``Health/Check`` of ``liveness`` on a new connection (the kernel picks the worker)."""
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        request = health_pb2.HealthCheckRequest(service="liveness")
        return int(stub.Check(request, timeout=10).status)


def test_picker_workers_share_the_port_and_stop_together() -> None:
    port, admin = free_port(), free_port()
    command = mmgate_command(
        "extproc", "--config", str(REPO / "examples" / "round-robin.yaml"), "--endpoints", "127.0.0.1:9",
        "--port", str(port), "--admin-port", str(admin), "--workers", "2", "--no-access-log",
        "--log-level", "warning", "--drain-seconds", "0", "--grace-seconds", "0",
    )  # fmt: skip
    picker = subprocess.Popen(command, env=subprocess_env(), stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120  # two processes importing on a loaded machine
        while True:
            assert picker.poll() is None, picker.stderr.read().decode() if picker.stderr else ""
            try:
                if _liveness(port) == health_pb2.HealthCheckResponse.SERVING:
                    break
            except grpc.RpcError:
                assert time.monotonic() < deadline, "the picker workers never answered"
                time.sleep(0.2)
        workers = _children(picker.pid)
        assert len(workers) == 2
        serving = health_pb2.HealthCheckResponse.SERVING
        assert [_liveness(port) for _ in range(10)] == [serving] * 10
        picker.send_signal(signal.SIGTERM)
        assert picker.wait(timeout=60) == 0
        assert _children(picker.pid) == []
    finally:
        if picker.poll() is None:
            picker.kill()
            picker.wait()


def test_workers_below_one_is_a_usage_error() -> None:
    command = mmgate_command("extproc", "--endpoints", "127.0.0.1:9", "--workers", "0")
    done = subprocess.run(command, env=subprocess_env(), capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "--workers must be at least 1" in done.stderr
