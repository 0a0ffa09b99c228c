"""The scenarios, tenants and systems of ``mmgate bench flow-control``, shared by its DES and HTTP
runs.

Tenant A's light request (one 448x336 image, a short question) and tenant B's heavy one (several
1280x720 photos); each scenario's offered rates, from the fleet's capacity for each shape measured
in the DES (:func:`plan`); and each system's config: examples/aggregated.yaml, with flow control
and the system's fairness policy added (``none``: without flow control).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from mmgate_bench.routing.des import TENANT, DesOptions, Simulation
from mmgate_bench.routing.systems import EXAMPLES, System
from mmgate_bench.workloads.media import image
from mmgate_bench.workloads.synthetic import Message, WorkItem, text_of

SCENARIOS = ("light-victim", "cheap-vs-heavy", "priority")
SCHEDULER = "aggregated.yaml"  # examples/: the scheduler every system runs, flow control or not
OBJECTIVES = [{"name": "critical", "priority": 10}, {"name": "batch", "priority": -1}]
SYSTEMS: dict[str, str | None] = {
    "none": None,
    "global-fcfs": "global-strict-fairness-policy",
    "round-robin": "round-robin-fairness-policy",
    "media-cost": "media-cost-fairness-policy",
}
PHOTO = (1280, 720)
SMALL = (448, 336)


def light(n: int, rng: random.Random, objective: str = "") -> WorkItem:
    msg = Message("user", (image(f"a:{n}", *SMALL), text_of(40, rng)))
    return WorkItem(f"A-{n}", (msg,), 32, group=TENANT + "A" + objective)


def heavy(n: int, rng: random.Random, photos: int, objective: str = "") -> WorkItem:
    shots = tuple(image(f"b:{n}:{k}", *PHOTO) for k in range(photos))
    msg = Message("user", (*shots, text_of(60, rng)))
    return WorkItem(f"B-{n}", (msg,), 64, group=TENANT + "B" + objective)


Make = Callable[[int, random.Random], WorkItem]
Schedule = list[tuple[float, WorkItem]]


def stream(make: Make, rate: float, duration_s: float, seed: int) -> Schedule:
    """Evenly spaced arrivals of fresh items (no cache can help: every image is new)."""
    rng = random.Random(seed)
    count = int(rate * duration_s)
    return [(i / rate, make(i, rng)) for i in range(count)]


def capacity(make: Make, opts: DesOptions, count: int, folder: Path) -> float:
    """Requests per second the fleet completes of one shape alone: ``count`` of them sent at
    once, over the time until the last one finishes (the pods batch as deep as they can)."""
    schedule = [(0.0, item) for _, item in stream(make, 1.0, float(count), 99)]
    path = folder / "capacity.yaml"
    path.write_text(config_of("none", 0))
    result = Simulation(System("capacity", config=path), opts).run_schedule(schedule, 0.0, 0.0, 3600.0)
    ends = [r.sent_s + r.e2e_s for r in result.records if r.e2e_s is not None]
    return len(ends) / max(ends) if ends else 0.0


@dataclass(frozen=True, slots=True)
class Load:
    """How hard a scenario pushes: seconds of arrivals, B's offered rate over B's capacity, A's
    rate (requests/s), and in ``cheap-vs-heavy`` A's rate as a share of A's capacity instead."""

    duration_s: float = 60.0
    overload: float = 2.5
    a_rate: float = 2.5
    a_share: float = 0.4


@dataclass(frozen=True, slots=True)
class Plan:
    """One scenario made concrete: each shape's capacity (requests/s, the fleet alone with it),
    the offered rates, and each tenant's arrivals."""

    scenario: str
    capacity: dict[str, float]
    offered: dict[str, float]
    a: Schedule
    b: Schedule

    @property
    def both(self) -> Schedule:
        return sorted(self.a + self.b, key=lambda pair: pair[0])


def plan(scenario: str, load: Load, opts: DesOptions, folder: Path) -> Plan:
    """The arrivals of ``scenario``, with rates from the fleet's capacities measured in the DES
    (the same simulated engines the HTTP run starts as processes):

    - ``light-victim``: A one small image at ``a_rate``; B eight photos at ``overload`` x B's capacity.
    - ``cheap-vs-heavy``: A at ``a_share`` x A's capacity; B six to eight photos at ``overload`` x.
    - ``priority``: light-victim's load, A ``critical`` (priority 10), B ``batch`` (-1, sheddable).
    """
    if scenario not in SCENARIOS:
        raise ValueError(f"unknown scenario {scenario!r}; choose from {', '.join(SCENARIOS)}")

    def make_b(n: int, rng: random.Random) -> WorkItem:
        if scenario == "priority":
            return heavy(n, rng, 8, "@batch")
        return heavy(n, rng, 8 if scenario == "light-victim" else 6 + n % 3)

    def make_a(n: int, rng: random.Random) -> WorkItem:
        return light(n, rng, "@critical" if scenario == "priority" else "")

    cap_b = capacity(make_b, opts, 60, folder)
    cap_a = capacity(light, opts, 600, folder)
    a_rate = load.a_share * cap_a if scenario == "cheap-vs-heavy" else load.a_rate
    b_rate = load.overload * cap_b
    return Plan(
        scenario,
        {"A": cap_a, "B": cap_b},
        {"A": a_rate, "B": b_rate},
        stream(make_a, a_rate, load.duration_s, 1),
        stream(make_b, b_rate, load.duration_s, 2),
    )


def config_of(name: str, inflight_tokens: int) -> str:
    """The system's config: examples/aggregated.yaml, plus flow control with the system's fairness
    policy (a pod counts as saturated past ``inflight_tokens`` priced prompt tokens sent there
    and not prefilled yet, besides llm-d's default thresholds) and two objectives."""
    config = yaml.safe_load((EXAMPLES / SCHEDULER).read_text())
    policy = SYSTEMS[name]
    if policy is None:
        return str(yaml.safe_dump(config))
    detector: dict[str, Any] = {"type": "utilization-detector"}
    if inflight_tokens:
        detector["parameters"] = {"maxInflightTokens": inflight_tokens}
    config["plugins"].append(detector)
    config["featureGates"] = ["flowControl"]
    config["flowControl"] = {
        "defaultRequestTTL": "0s",  # held until served: the drain window ends the run instead
        "saturationDetector": {"pluginRef": "utilization-detector"},
        "defaultPriorityBand": {"fairnessPolicyRef": policy},
    }
    config.setdefault("mmgate", {})["inferenceObjectives"] = OBJECTIVES
    return str(yaml.safe_dump(config))
