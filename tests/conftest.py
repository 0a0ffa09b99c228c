"""Shared test helpers.

Subprocesses must run this checkout's code (not whatever an editable install points at), so
spawn them with :func:`mmgate_command` and :func:`subprocess_env`.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from support.redis_server import RedisServer

REPO = Path(__file__).resolve().parent.parent
SRC = REPO / "src"


def subprocess_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(SRC) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.update(extra)
    return env


def mmgate_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "mmgate", *args]


@pytest.fixture
def redis_server() -> Iterator[RedisServer]:
    """A real redis-server on a free loopback port, for one test."""
    with RedisServer() as server:
        yield server
