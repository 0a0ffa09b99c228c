"""Classification: the fairness id and priority of a request, from its headers, its API key's
defaults and the objectives of the config and of Kubernetes."""

from __future__ import annotations

from pathlib import Path

import pytest

from mmgate.control.apikeys import Identity, hash_key, load_keys
from mmgate.control.flow.classify import OBJECTIVE_HEADER, TTFT_SLO_HEADER, Classifier, FlowKey, Objective

OBJECTIVES = (Objective("critical", 10, 0.5), Objective("batch", -1))


def test_the_header_then_the_keys_default_then_priority_zero() -> None:
    c = Classifier(OBJECTIVES)
    gold = Identity("gold", "k1", objective="critical")
    bulk = Identity("bulk", "k2", priority=-3)
    assert c.classify({OBJECTIVE_HEADER: "batch"}, gold) == FlowKey("gold", -1)  # the header first
    assert c.classify({}, gold) == FlowKey("gold", 10)
    assert c.classify({OBJECTIVE_HEADER: "unknown"}, gold) == FlowKey("gold", 10)  # unknown: as none
    assert c.classify({}, bulk) == FlowKey("bulk", -3)
    assert c.classify({OBJECTIVE_HEADER: "critical"}, bulk) == FlowKey("bulk", 10)
    assert c.classify({OBJECTIVE_HEADER: "unknown"}, None) == FlowKey("default-flow", 0)
    # A key naming an objective nobody defines has no default.
    assert c.classify({}, Identity("t", "k3", objective="gone")) == FlowKey("t", 0)
    # The key's objective gives its TTFT target too; the header's target comes first.
    assert c.ttft_target({}, gold) == 0.5
    assert c.ttft_target({TTFT_SLO_HEADER: "200"}, gold) == 0.2
    assert c.ttft_target({}, bulk) is None


def test_objectives_from_kubernetes_merge_over_the_configs() -> None:
    c = Classifier(OBJECTIVES)
    c.discovered({"critical": 7, "premium": 20})
    assert c.classify({OBJECTIVE_HEADER: "critical"}, None).priority == 7  # the resource wins
    assert c.ttft_target({OBJECTIVE_HEADER: "critical"}, None) == 0.5  # the file's target stays
    assert c.classify({OBJECTIVE_HEADER: "premium"}, None).priority == 20
    assert c.classify({OBJECTIVE_HEADER: "batch"}, None).priority == -1  # only in the file
    c.discovered({})  # the resources were deleted: the file's objectives are what is left
    assert c.classify({OBJECTIVE_HEADER: "critical"}, None).priority == 10
    assert c.classify({OBJECTIVE_HEADER: "premium"}, None).priority == 0
    assert set(c.objectives) == {"critical", "batch"}


def test_a_key_gives_an_objective_or_a_priority_not_both(tmp_path: Path) -> None:
    path = tmp_path / "keys.yaml"
    digest = hash_key("k")
    path.write_text(f"keys:\n- {{sha256: {digest}, tenant: t, objective: critical}}\n")
    assert load_keys(path)[digest].objective == "critical"
    path.write_text(f"keys:\n- {{sha256: {digest}, tenant: t, priority: -2}}\n")
    assert load_keys(path)[digest].priority == -2
    path.write_text(f"keys:\n- {{sha256: {digest}, tenant: t, objective: a, priority: 1}}\n")
    with pytest.raises(ValueError, match=r"keys\[0\]: set objective or priority, not both"):
        load_keys(path)
    path.write_text(f"keys:\n- {{sha256: {digest}, tenant: t, priority: high}}\n")
    with pytest.raises(ValueError, match="priority"):
        load_keys(path)
