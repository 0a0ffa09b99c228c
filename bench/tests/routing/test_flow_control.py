"""Flow control in the discrete-event benchmark: the same dispatcher on virtual time."""

from __future__ import annotations

import random
from pathlib import Path

from mmgate_bench.routing.des import DesOptions
from mmgate_bench.routing.flow_control import run_system
from mmgate_bench.routing.flow_scenarios import config_of, heavy, light

OPTS = DesOptions(profile="fast", pods=1)


def test_config_of_turns_flow_control_on_over_the_aggregated_example() -> None:
    text = config_of("media-cost", 8000)
    assert "media-cost-fairness-policy" in text and "maxInflightTokens: 8000" in text
    assert "flowControl" not in config_of("none", 8000)


def test_a_sheddable_flood_is_refused_while_critical_requests_are_all_served(tmp_path: Path) -> None:
    rng = random.Random(0)
    critical = [(0.05 * i, light(i, rng, "@critical")) for i in range(6)]
    batch = [(0.01 * i, heavy(i, rng, 8, "@batch")) for i in range(30)]
    schedule = sorted(critical + batch, key=lambda pair: pair[0])
    tenants, _ = run_system("media-cost", schedule, OPTS, (1.0, 120.0, 2000), tmp_path)
    assert tenants["A"].completed == 6 and tenants["A"].refused == 0
    assert tenants["B"].refused > 0  # shed: 429 while the pod was saturated
    assert tenants["B"].completed + tenants["B"].refused == 30  # every request answered
    none, _ = run_system("none", schedule, OPTS, (1.0, 120.0, 2000), tmp_path)
    assert none["B"].completed == 30  # without flow control the pod queues them all
