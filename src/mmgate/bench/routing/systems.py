"""The systems a benchmark compares: mmgate configs and, in HTTP mode, peer routers.

A system name is one of:

- a path to an mmgate/llm-d YAML config;
- the name of a config in the checkout's ``examples/`` (``aggregated``, ``encoder-affinity`` …) or
  shipped with the benchmark (``round-robin``, ``random``, ``prefix-only``);
- a peer router, ``sglang-router`` or ``vllm-router``, optionally with a policy after a colon
  (``vllm-router:round_robin``; default ``cache_aware``). Peers run only in HTTP mode, from the
  environment ``make peers`` creates; absent ones are skipped with a message.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

BENCH_CONFIGS = Path(__file__).parent / "configs"
EXAMPLES = Path(__file__).resolve().parents[4] / "examples"
PEER_PACKAGES = ("sglang-router", "vllm-router")


@dataclass(frozen=True, slots=True)
class System:
    name: str
    config: Path | None = None  # an mmgate system
    peer: str | None = None  # a peer package
    policy: str | None = None

    @property
    def is_peer(self) -> bool:
        return self.peer is not None


class UnknownSystem(ValueError):
    pass


def resolve(name: str) -> System:
    """Turn a ``--systems`` entry into a :class:`System` (raises :class:`UnknownSystem`)."""
    package, _, policy = name.partition(":")
    if package in PEER_PACKAGES:
        return System(name=name, peer=package, policy=policy or "cache_aware")
    path = Path(name)
    if path.suffix in (".yaml", ".yml"):
        if not path.exists():
            raise UnknownSystem(f"config file {name} does not exist")
        return System(name=path.stem, config=path)
    for folder in (EXAMPLES, BENCH_CONFIGS):
        candidate = folder / f"{name}.yaml"
        if candidate.exists():
            return System(name=name, config=candidate)
    known = sorted(
        {p.stem for folder in (EXAMPLES, BENCH_CONFIGS) if folder.exists() for p in folder.glob("*.yaml")}
    )
    raise UnknownSystem(
        f"unknown system {name!r}: give a YAML path, one of {', '.join(known)}, "
        f"or a peer router ({', '.join(PEER_PACKAGES)}[:policy])"
    )


def parse_systems(text: str) -> list[System]:
    return [resolve(s.strip()) for s in text.split(",") if s.strip()]
