"""Child processes of a benchmark: started in their own session, waited for, stopped."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from mmgate_bench.processes import Managed, free_port, wait_until_serving
from support.processes import subprocess_env

BODY = json.dumps({"model": "null-model", "messages": [{"role": "user", "content": "hi"}]}).encode()


def test_a_server_is_waited_for_then_stopped_with_its_children(tmp_path: Path) -> None:
    port = free_port()
    command = [sys.executable, "-m", "mmgate_bench.overhead.nullserver", "--port", str(port)]
    server = Managed("null", command, tmp_path / "logs" / "null.log", env=subprocess_env())
    server.start()
    try:
        assert wait_until_serving(f"http://127.0.0.1:{port}/v1/chat/completions", BODY, server) is None
        assert server.alive() and server.tree()[0] == server.pid
    finally:
        server.stop()
    assert not server.alive() and server.tree() == []


def test_a_process_that_dies_is_reported_with_its_exit_code_and_log(tmp_path: Path) -> None:
    command = [sys.executable, "-c", "import sys; print('no config'); sys.exit(3)"]
    broken = Managed("broken", command, tmp_path / "broken.log")
    broken.start()
    try:
        why = wait_until_serving(f"http://127.0.0.1:{free_port()}/", BODY, broken, timeout=30)
    finally:
        broken.stop()
    assert why == "exited with code 3"
    assert broken.log_tail() == "no config"
