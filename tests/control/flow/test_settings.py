"""What the flow-control sections of a config mean, and the mistakes ``mmgate check`` names."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from mmgate.config import parse_config
from mmgate.config.flow import duration_s, quantity
from mmgate.config.strict import ConfigError
from mmgate.control.flow import FlowSettings, flow_settings_of
from mmgate.control.flow.policies import GlobalStrict, RoundRobin, VirtualCost


def settings(text: str) -> FlowSettings | None:
    config = parse_config(yaml.safe_load(text))
    return flow_settings_of(config.picker, config.mmgate)


def mistakes(text: str) -> dict[str, str]:
    with pytest.raises(ConfigError) as caught:
        settings(text)
    return {e.path: e.reason for e in caught.value.errors}


def test_off_without_the_feature_gate_even_with_a_section() -> None:
    assert settings("flowControl: {maxRequests: 10}") is None


def test_llm_d_defaults_and_what_bands_fall_back_to() -> None:
    s = settings("""
featureGates: [flowControl]
plugins:
- {type: round-robin-fairness-policy, name: rr}
flowControl:
  maxBytes: 1Gi
  defaultRequestTTL: 90s
  defaultPriorityBand: {fairnessPolicyRef: rr, maxRequestsPerFlow: 10}
  priorityBands:
  - {priority: 5, fairnessPolicyRef: media-cost-fairness-policy, orderingPolicyRef: edf-ordering-policy}
  - {priority: -3, maxRequests: 20}
""")
    assert s is not None
    d = s.detector
    assert (d.queue_depth, d.kv_utilization, d.staleness_s) == (5, 0.8, 2.0)
    assert (s.limits.max_requests, s.limits.max_bytes) == (0, 2**30)
    default = s.plan(0)
    assert isinstance(default.make_policy(), RoundRobin) and not default.edf
    assert default.limits.ttl_s == 90.0 and default.limits.max_requests_per_flow == 10
    five = s.plan(5)
    assert isinstance(five.make_policy(), VirtualCost) and five.edf and five.cost is not None
    assert five.edf_default_target_s == 10.0
    # A negative priority holds nothing unless its band says how many.
    assert not s.plan(-1).limits.hold
    assert s.plan(-3).limits.hold and s.plan(-3).limits.max_requests == 20
    assert isinstance(s.plan(-1).make_policy(), RoundRobin)  # the default band, no negative one


def test_the_deprecated_section_overrides_the_detector_plugin() -> None:
    s = settings("""
featureGates: [flowControl]
plugins:
- {type: utilization-detector, parameters: {queueDepthThreshold: 9, maxInflightTokens: 4000}}
saturationDetector: {kvCacheUtilThreshold: 0.5, metricsStalenessThreshold: 500ms}
""")
    assert s is not None
    d = s.detector
    assert (d.queue_depth, d.kv_utilization, d.staleness_s, d.max_inflight_tokens) == (9, 0.5, 0.5, 4000)


def test_mistakes_are_named_by_their_key() -> None:
    found = mistakes("""
featureGates: [flowControl]
plugins:
- {type: fcfs-ordering-policy, name: fifo}
flowControl:
  maxBytes: 2Gx
  defaultRequestTTL: soon
  saturationDetector: {pluginRef: fifo}
  priorityBands:
  - {priority: 1, fairnessPolicyRef: fifo}
  - {maxRequests: 3}
mmgate:
  inferenceObjectives:
  - {name: a, priority: 1}
  - {name: a, priority: 2}
""")
    assert set(found) == {
        "flowControl.maxBytes",
        "flowControl.defaultRequestTTL",
        "flowControl.saturationDetector.pluginRef",
        "flowControl.priorityBands[0].fairnessPolicyRef",
        "flowControl.priorityBands[1].priority",
        "mmgate.inferenceObjectives[1].name",
    }
    assert "not a saturation detector" in found["flowControl.saturationDetector.pluginRef"]


def test_unknown_plugin_parameters_are_refused() -> None:
    found = mistakes("""
featureGates: [flowControl]
plugins:
- {type: media-cost-fairness-policy, parameters: {prefillTokensPerSec: 1}}
""")
    assert [p for p in found if p.startswith("plugins[0].parameters")], found


@pytest.mark.parametrize(
    ("text", "value"), [(100, 100), ("1k", 1000), ("1Ki", 1024), ("2Gi", 2 * 2**30), ("1.5M", 1_500_000)]
)
def test_quantities(text: Any, value: int) -> None:
    assert quantity(text) == value


@pytest.mark.parametrize(
    ("text", "value"), [("60s", 60.0), ("500ms", 0.5), ("1m30s", 90.0), (2, 2.0), ("0", 0.0), ("0s", 0.0)]
)
def test_durations(text: Any, value: float) -> None:
    assert duration_s(text) == value


@pytest.mark.parametrize("bad", ["-1", "1 G", "ten", True, -3])
def test_bad_quantities(bad: Any) -> None:
    with pytest.raises(ValueError):
        quantity(bad)


def test_global_strict_is_the_default_policy() -> None:
    s = settings("featureGates: [flowControl]")
    assert s is not None and isinstance(s.plan(0).make_policy(), GlobalStrict)
