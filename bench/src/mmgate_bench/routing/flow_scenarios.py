"""The tenants and systems of ``mmgate bench flow-control``, shared by its DES and HTTP runs.

Tenant A's light request (one 448x336 image, a short question) and tenant B's heavy one (several
1280x720 photos), and each system's config: examples/aggregated.yaml, with flow control and the
system's fairness policy added (``none``: without flow control).
"""

from __future__ import annotations

import random
from typing import Any

import yaml

from mmgate_bench.routing.des import TENANT
from mmgate_bench.routing.systems import EXAMPLES
from mmgate_bench.workloads.media import image
from mmgate_bench.workloads.synthetic import Message, WorkItem, text_of

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
