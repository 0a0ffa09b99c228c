"""The peer routers the benchmarks compare mmgate with: sglang-router, vllm-router and the Shepherd
Model Gateway (``smg``, the SGLang router's successor, of which vllm-router is a fork).

All three are Rust routers shipped on PyPI as Python packages with a ``launch_router`` module. They
live in their own virtual environment (``make peers`` creates ``.venv-peers``) so that their
pinned dependencies never meet mmgate's. This module only finds that environment, reads the
installed versions and builds each router's command line; the harness starts and stops them.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

PEERS_VENV_ENV = "MMGATE_PEERS_VENV"
DEFAULT_VENV = ".venv-peers"


@dataclass(frozen=True, slots=True)
class Peer:
    """One peer router package: how to run it and which policies the benchmark uses."""

    package: str
    module: str
    policies: tuple[str, ...] = ("cache_aware", "round_robin")

    def command(
        self, python: Path, *, port: int, metrics_port: int, workers: Sequence[str], policy: str
    ) -> list[str]:
        """The command line of one router instance on ``port`` in front of ``workers``.

        Each instance gets its own Prometheus port (both default to a fixed one, so two instances
        would collide) and quiet logging (per-request logs would cost CPU we are measuring).
        """
        level = "warning" if self.package == "vllm-router" else "warn"
        return [
            str(python),
            "-m",
            self.module,
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--worker-urls",
            *workers,
            "--policy",
            policy,
            "--prometheus-host",
            "127.0.0.1",
            "--prometheus-port",
            str(metrics_port),
            "--log-level",
            level,
        ]


PEERS = (
    Peer("sglang-router", "sglang_router.launch_router"),
    Peer("vllm-router", "vllm_router.launch_router"),
    # smg 1.13.0's launcher offers random, round_robin, cache_aware, power_of_two and manual (its
    # prefix_hash policy and multimodal encode policy are not in the PyPI release's CLI).
    Peer("smg", "smg.launch_router", ("cache_aware", "round_robin", "power_of_two")),
)


def find_peers_python(explicit: str | None = None, roots: Sequence[Path] = ()) -> Path | None:
    """The peers environment's Python: ``explicit``, else $MMGATE_PEERS_VENV, else ``.venv-peers``
    in the current directory or one of ``roots``. None when there is none."""
    candidates: list[Path] = []
    if explicit:
        candidates.append(Path(explicit))
    elif os.environ.get(PEERS_VENV_ENV):
        candidates.append(Path(os.environ[PEERS_VENV_ENV]))
    else:
        candidates += [Path.cwd() / DEFAULT_VENV, *(root / DEFAULT_VENV for root in roots)]
    for venv in candidates:
        python = venv / "bin" / "python"
        if python.exists():
            return python
    return None


def installed_versions(python: Path) -> dict[str, str]:
    """``{package: version}`` of the peers installed in that environment (absent ones left out)."""
    names = [peer.package for peer in PEERS]
    script = (
        "import importlib.metadata as m, json, sys\n"
        "out = {}\n"
        "for n in sys.argv[1:]:\n"
        "    try: out[n] = m.version(n)\n"
        "    except m.PackageNotFoundError: pass\n"
        "print(json.dumps(out))\n"
    )
    try:
        done = subprocess.run(
            [str(python), "-c", script, *names], capture_output=True, text=True, timeout=60, check=True
        )
    except (OSError, subprocess.SubprocessError):
        return {}
    found = json.loads(done.stdout or "{}")
    return {str(k): str(v) for k, v in found.items()}
