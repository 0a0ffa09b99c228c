"""predicted-ttft through the discrete-event benchmark: with no rate configured the producer learns
each simulated pod's rates from the TTFTs the controller reports, and its front-end term tracks
what the simulated API servers charge. (Its unit behaviour is tested with the product, in
tests/scheduling/plugins/.)"""

from __future__ import annotations

import statistics
from pathlib import Path

import yaml

from mmgate.scheduling.plugins.predicted_ttft_producer import PredictedTTFTProducer
from mmgate_bench.routing.des import DesOptions, Simulation
from mmgate_bench.routing.records import Ladder
from mmgate_bench.routing.systems import resolve
from mmgate_bench.workloads.synthetic import build as build_workload
from mmgate_bench.workloads.synthetic import shared_prefix
from support.processes import REPO

PROFILES = REPO / "src" / "mmgate" / "sim" / "profiles"
EXAMPLES = REPO / "examples"


def test_through_the_des_a_slow_pod_gets_less_work_with_no_rate_configured(tmp_path: Path) -> None:
    """Two simulated pods, one with the H200 profile and one whose prefill and encoder are 4x
    slower; the config names no rate for either. The producer learns each pod's own rates from
    the TTFTs the controller reports, and the slow pod ends up with a small share of the work."""
    profile = yaml.safe_load((PROFILES / "qwen3-vl-32b-h200-tp2.yaml").read_text())
    profile["name"] = "slow-h200"
    profile["step"]["prefill_ms_per_token"] *= 4
    for key in ("c0_ms", "c1_ms_per_token", "c2_ms_per_token2"):
        profile["encoder"][key] *= 4
    slow_profile = tmp_path / "slow.yaml"
    slow_profile.write_text(yaml.safe_dump(profile))
    config = tmp_path / "learned.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "llm-d.ai/v1alpha1",
                "kind": "EndpointPickerConfig",
                "plugins": [
                    {"type": "predicted-ttft-producer", "parameters": {"minSamples": 5}},
                    {"type": "predicted-ttft-scorer"},
                ],
            }
        )
    )
    workload = shared_prefix(
        groups=400,
        prompts_per_group=1,
        images=1,
        width=640,
        height=480,
        question_tokens=1500,
        output_tokens=20,
    )
    opts = DesOptions(pods=2, profiles=("qwen3-vl-32b-h200-tp2", str(slow_profile)))
    sim = Simulation(resolve(str(config)), opts)
    items = workload.stream()
    rung = sim.run_rung(lambda: next(items), 12.0, 30.0, Ladder(rates=(12.0,), duration_s=30.0), 0)
    assert all(r.ok for r in rung.records)
    slow = sim.endpoints[1].name
    later = [r for r in rung.records if r.sent_s >= 15.0]
    share = sum(r.endpoint == slow for r in later) / len(later)
    assert share < 0.3, share
    producer = sim.scheduler.plugins["predicted-ttft-producer"]
    assert isinstance(producer, PredictedTTFTProducer)
    fast_state, slow_state = (sim.picker.states[e.name] for e in sim.endpoints)
    assert producer.learner.learned(slow)
    assert (
        producer.learner.rates(slow_state).prefill_s_per_token
        > 2 * producer.learner.rates(fast_state).prefill_s_per_token
    )


def test_through_the_des_the_term_predicts_what_the_simulated_front_end_charges(tmp_path: Path) -> None:
    """Two omni pods serving clips, recordings, images and text with the shipped example: with
    the front-end term its predictions track the TTFTs the simulated API servers produce several
    times closer than the same config without it (measured 9 vs 29 ms)."""
    example = yaml.safe_load((EXAMPLES / "predicted-ttft.yaml").read_text())
    errors = {}
    for name in ("term", "off"):
        if name == "off":
            for plugin in example["plugins"]:
                if plugin["type"] == "predicted-ttft-producer":
                    plugin["parameters"]["frontEnd"] = {}
        config = tmp_path / f"{name}.yaml"
        config.write_text(yaml.safe_dump(example))
        sim = Simulation(resolve(str(config)), DesOptions(pods=2, profile="qwen2.5-omni-7b-h100"))
        items = build_workload("mixed-av", requests=400).stream()
        rung = sim.run_rung(items.__next__, 3.0, 60.0, Ladder(rates=(3.0,), duration_s=60.0), 0)
        assert all(r.ok for r in rung.records)
        misses = [
            abs(r.predicted_ttft_s - r.ttft_s)
            for r in rung.records
            if r.sent_s >= 10.0 and r.ttft_s is not None and r.predicted_ttft_s is not None
        ]
        assert len(misses) > 100
        errors[name] = statistics.median(misses)
    assert errors["term"] < 0.5 * errors["off"], errors
