"""The systems a benchmark compares: mmgate configs and, in HTTP mode, peer routers.

A system name is one of:

- a path to an mmgate/llm-d YAML config;
- the name of a gateway config in the checkout's ``examples/`` (``round-robin``, ``aggregated``,
  ``encoder-affinity`` …; ``examples/*.yaml`` holds only gateway configs, and a file that is not
  one is refused with the reason);
- a peer router, ``sglang-router``, ``vllm-router`` or ``smg``, optionally with a policy after a
  colon (``vllm-router:round_robin``, ``smg:power_of_two``; default ``cache_aware``). Peers run
  only in HTTP mode, from the environment ``make peers`` creates; absent ones are skipped with a
  message.

Every config is loaded and its scheduler built (as ``mmgate serve`` does) when the name is
resolved, so a file the gateway would refuse is refused here, before any process starts, with the
reason.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from mmgate.config import ConfigError, load_config
from mmgate.scheduling import build_scheduler

EXAMPLES = Path(__file__).resolve().parents[4] / "examples"
PEER_PACKAGES = ("sglang-router", "vllm-router", "smg")


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


def _is_gateway_config(path: Path) -> bool:
    try:
        load_config(path)
    except ConfigError:
        return False
    return True


@cache
def example_systems() -> tuple[str, ...]:
    """The names of the gateway configs in ``examples/`` (empty outside a checkout)."""
    if not EXAMPLES.is_dir():
        return ()
    return tuple(sorted(p.stem for p in EXAMPLES.glob("*.yaml") if _is_gateway_config(p)))


def systems_help() -> str:
    """One sentence listing what ``--systems`` accepts, for ``--help`` and error messages."""
    names = ", ".join(example_systems()) or "none found"
    return (
        f"Accepts the example configs ({names}), a path to a YAML config, or a peer router "
        f"({', '.join(PEER_PACKAGES)}[:policy]; HTTP mode only, skipped in discrete-event mode)."
    )


def _config_system(name: str, path: Path) -> System:
    try:
        config = load_config(path)
        build_scheduler(config.picker, mmgate=config.mmgate)  # what `mmgate serve` does next
    except ConfigError as exc:
        problems = str(exc).splitlines()
        more = f" (and {len(problems) - 1} more: mmgate check {path})" if len(problems) > 1 else ""
        raise UnknownSystem(f"system {name!r}: {path} is not a gateway config: {problems[0]}{more}") from None
    return System(name=path.stem, config=path)


def resolve(name: str) -> System:
    """Turn a ``--systems`` entry into a :class:`System` (raises :class:`UnknownSystem`)."""
    package, _, policy = name.partition(":")
    if package in PEER_PACKAGES:
        return System(name=name, peer=package, policy=policy or "cache_aware")
    path = Path(name)
    if path.suffix in (".yaml", ".yml") or "/" in name:
        if not path.is_file():
            raise UnknownSystem(f"config file {name} does not exist")
        return _config_system(name, path)
    example = EXAMPLES / f"{name}.yaml"
    if example.is_file():
        return System(name=name, config=_config_system(name, example).config)
    close = difflib.get_close_matches(name, [*example_systems(), *PEER_PACKAGES], n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    raise UnknownSystem(f"unknown system {name!r}{hint}. {systems_help()}")


def parse_systems(text: str) -> list[System]:
    systems = [resolve(s.strip()) for s in text.split(",") if s.strip()]
    if not systems:
        raise UnknownSystem(f"--systems names no system. {systems_help()}")
    return systems
