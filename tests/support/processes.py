"""Subprocesses that run this checkout's code (not whatever an editable install points at):
spawn them with :func:`mmgate_command` and the environment of :func:`subprocess_env`."""

from __future__ import annotations

import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SRC = REPO / "src"


def subprocess_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(SRC) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.update(extra)
    return env


def mmgate_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "mmgate", *args]
