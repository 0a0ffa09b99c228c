"""Subprocesses that run this checkout's code (not whatever an editable install points at):
spawn them with :func:`mmgate_command` and the environment of :func:`subprocess_env`, or a server
as a :class:`ServerProcess`."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import aiohttp

REPO = Path(__file__).resolve().parents[2]
SRC = REPO / "src"
BENCH_SRC = REPO / "bench" / "src"  # the benchmarks' distribution (mmgate_bench), for bench/tests


def subprocess_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(SRC), str(BENCH_SRC), *([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])]
    )
    env.update(extra)
    return env


def mmgate_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "mmgate", *args]


# mmgate's command with some top-level packages made impossible to import (a finder first on
# sys.meta_path refuses them), as on an install without an extra or without mmgate-bench.
_WITHOUT = """
import sys
class Absent:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in sys.argv[1].split(","):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
sys.meta_path.insert(0, Absent())
from mmgate.cli import main
raise SystemExit(main(sys.argv[2:]))
"""


def run_without(absent: Sequence[str], *args: str) -> subprocess.CompletedProcess[str]:
    """``mmgate ARGS`` in a child process where the packages ``absent`` cannot be imported."""
    command = [sys.executable, "-c", _WITHOUT, ",".join(absent), *args]
    return subprocess.run(command, capture_output=True, text=True, env=subprocess_env(), timeout=60)


class ServerProcess:
    """An ``mmgate`` server command (``serve``, ``engine``, ...) started on ``port`` of loopback;
    :meth:`ready` waits for ``path`` to answer 200, :meth:`stop` ends it and returns its log."""

    def __init__(
        self, args: list[str], port: int, *, ready_path: str, env: dict[str, str] | None = None
    ) -> None:
        self.port = port
        self.ready_path = ready_path
        self.process = subprocess.Popen(
            mmgate_command(*args),
            env=env or subprocess_env(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def ready(self, session: aiohttp.ClientSession, limit_s: float = 120.0) -> None:
        """Until ``ready_path`` answers 200 (the limit only catches a hang: a server importing torch
        on a loaded machine takes its time)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + limit_s
        while loop.time() < deadline:
            assert self.process.poll() is None, f"{self.url} exited: {self.stop()}"
            try:
                async with session.get(self.url + self.ready_path) as resp:
                    if resp.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.05)
        raise AssertionError(f"{self.url}{self.ready_path} never answered 200")

    def stop(self) -> str:
        """Stop it; its log."""
        if self.process.poll() is None:
            self.process.terminate()
        try:
            _, err = self.process.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            _, err = self.process.communicate()
        return err.decode(errors="replace")
