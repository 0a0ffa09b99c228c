"""A real ``redis-server`` (Debian's package; ``.ci/run`` installs it) on a free loopback port.

No persistence and no config file: the server lives in a temporary directory for one test, so a
test may kill it and start it again on the same port (an empty Redis, as after a restart without
persistence) to check what the gateway does when its shared index goes away and comes back.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import BinaryIO

import redis

from support.upstreams import free_port


class RedisServer:
    def __init__(self, port: int | None = None) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError(
                "redis-server is not installed (apt-get install -y redis-server; .ci/run does)"
            )
        self.binary = binary
        self.port = port or free_port()
        self._dir = tempfile.TemporaryDirectory(prefix="mmgate-redis-")
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: BinaryIO | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self, timeout_s: float = 10.0) -> None:
        args = [
            self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
            "--dir", self._dir.name, "--daemonize", "no", "--protected-mode", "yes", "--loglevel", "warning",
        ]  # fmt: skip
        self._log = (Path(self._dir.name) / "stderr").open("ab")
        self._proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=self._log)
        deadline = time.monotonic() + timeout_s
        client = redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=0.5)
        try:
            while True:
                try:
                    if client.ping():
                        return
                except redis.RedisError:
                    pass
                if self._proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"redis-server did not start on port {self.port}")
                time.sleep(0.02)
        finally:
            client.close()

    def kill(self) -> None:
        """Stop it at once (SIGKILL), as a crash would."""
        if self._proc is not None:
            self._proc.kill()
            self._proc.wait()
            self._proc = None
        if self._log is not None:
            self._log.close()
            self._log = None

    def freeze(self) -> None:
        """Stop it answering (SIGSTOP) while its connections stay open: every command now waits,
        as on a hung or overloaded server, instead of failing at once as after a crash."""
        if self._proc is not None:
            self._proc.send_signal(signal.SIGSTOP)

    def thaw(self) -> None:
        """Let a frozen server answer again (SIGCONT)."""
        if self._proc is not None:
            self._proc.send_signal(signal.SIGCONT)

    def close(self) -> None:
        self.kill()
        self._dir.cleanup()

    def __enter__(self) -> RedisServer:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
