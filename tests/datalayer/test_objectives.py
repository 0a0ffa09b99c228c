"""InferenceObjectives from the Kubernetes API: those of the pool, read through the real client
from a loopback server that speaks the list/watch protocol (the ``api`` fixture, conftest.py);
every object untrusted."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from mmgate.datalayer import objectives as objectives_module
from mmgate.datalayer.endpoints import EndpointRegistry
from mmgate.datalayer.kubernetes import KubernetesDiscovery, KubernetesSettings
from mmgate.datalayer.objectives import ObjectiveSet, objective_of
from support.kubeapi import FakeKubeAPI, inference_objective, inference_pool, pod
from support.waiting import until


async def follow(api: FakeKubeAPI, tmp_path: Path) -> tuple[KubernetesDiscovery, list[dict[str, int]]]:
    path = tmp_path / "kubeconfig"
    path.write_text(api.kubeconfig())
    await api.put("inferencepools", inference_pool("qwen", {"app": "vllm"}, [8000]))
    await api.put("pods", pod("a", "10.5.0.1", labels={"app": "vllm"}))
    source = KubernetesDiscovery(KubernetesSettings(namespace="ns", pool="qwen", kubeconfig=str(path)))
    heard: list[dict[str, int]] = []
    assert source.follow_objectives(lambda found: heard.append(dict(found)))
    await source.start(EndpointRegistry())
    await asyncio.wait_for(source.synced.wait(), 10)
    return source, heard


async def test_the_pools_objectives_are_followed_and_the_rest_skipped(
    api: FakeKubeAPI, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    await api.put("inferenceobjectives", inference_objective("critical", "qwen", 10))
    await api.put("inferenceobjectives", inference_objective("unset", "qwen"))  # priority 0
    await api.put("inferenceobjectives", inference_objective("llama-only", "llama", 99))  # another pool
    await api.put("inferenceobjectives", inference_objective("alien", "qwen", 5, group="example.com"))
    await api.put("inferenceobjectives", inference_objective("bad", "qwen", "high"))
    await api.put("inferenceobjectives", inference_objective("huge", "qwen", 2**40))
    caplog.set_level(logging.WARNING, "mmgate.datalayer")
    source, heard = await follow(api, tmp_path)
    try:
        await until(lambda: bool(heard), "the first list")
        assert heard[-1] == {"critical": 10, "unset": 0}
        assert "bad: spec.priority is not a 32-bit integer" in caplog.text
        assert "huge: spec.priority" in caplog.text
        await until(lambda: api.watches >= 3, "the watches")  # pool, pods, objectives

        await api.put("inferenceobjectives", inference_objective("critical", "qwen", 7))
        await until(lambda: heard[-1].get("critical") == 7, "a priority changed")
        await api.put("inferenceobjectives", inference_objective("batch", "qwen", -1))
        await until(lambda: "batch" in heard[-1], "an objective added")
        await api.put("inferenceobjectives", inference_objective("critical", "llama", 7))  # moved away
        await until(lambda: "critical" not in heard[-1], "an objective of another pool now")
        await api.put("inferenceobjectives", inference_objective("batch", "qwen", "broken"))
        await until(lambda: "batch" not in heard[-1], "an unreadable objective no longer applies")
        await api.delete("inferenceobjectives", "unset")
        await until(lambda: heard[-1] == {}, "deleted")

        # History compacted: the watch is told 410 Gone and the objectives are listed again.
        await api.put("inferenceobjectives", inference_objective("again", "qwen", 3))
        await until(lambda: heard[-1] == {"again": 3}, "added")
        lists = api.lists
        await api.compact()
        await until(lambda: api.lists > lists, "a relist")
        await api.put("inferenceobjectives", inference_objective("after", "qwen", 4))
        await until(lambda: heard[-1] == {"again": 3, "after": 4}, "watching again")
    finally:
        await source.stop()


async def test_a_cluster_without_the_resource_type_still_discovers_pods(tmp_path: Path) -> None:
    api = FakeKubeAPI(objectives=False)  # 404 for InferenceObjectives
    await api.start()
    try:
        source, heard = await follow(api, tmp_path)
        try:
            assert source.target is not None
            await asyncio.sleep(0.2)
            assert heard == []
        finally:
            await source.stop()
    finally:
        await api.stop()


def test_discovery_by_pod_selector_has_no_pool_to_follow_objectives_for() -> None:
    source = KubernetesDiscovery(KubernetesSettings(pod_selector="app=x", target_ports=(8000,)))
    assert not source.follow_objectives(lambda found: None)


def test_unreadable_objects_are_skipped_and_the_set_is_bounded(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    ours = inference_objective("x", "qwen", 1)
    assert objective_of(ours, "qwen") == ("x", 1)
    assert objective_of(inference_objective("x", "qwen", 1, kind="InferencePool"), "qwen") == ("x", 1)
    assert objective_of(inference_objective("x", "qwen", 1, kind="Service"), "qwen") is None
    assert objective_of(inference_objective("x", "other", 1), "qwen") is None
    bad: list[Any] = [
        None,
        [],
        {"metadata": {"name": ""}},
        {"metadata": {"name": "n" * 254}, "spec": {"poolRef": {"name": "qwen"}}},
        {"metadata": {"name": "n"}, "spec": {}},
        {"metadata": {"name": "n"}, "spec": {"poolRef": {"name": 7}}},
        {"metadata": {"name": "n"}, "spec": {"poolRef": {"name": "qwen", "group": ["g"]}}},
        {"metadata": {"name": "n"}, "spec": {"poolRef": {"name": "qwen"}, "priority": True}},
        {"metadata": {"name": "n"}, "spec": {"poolRef": {"name": "qwen"}, "priority": 1.5}},
    ]
    for obj in bad:
        with pytest.raises(ValueError):
            objective_of(obj, "qwen")

    monkeypatch.setattr(objectives_module, "MAX_OBJECTIVES", 3)
    heard: list[Mapping[str, int]] = []
    kept = ObjectiveSet("qwen", heard.append)
    caplog.set_level(logging.WARNING, "mmgate.datalayer")
    many = [inference_objective(f"o{i}", "qwen", i) for i in range(5)]
    kept.listed([*bad, *many] * 3)
    assert kept.priorities == {"o0": 0, "o1": 1, "o2": 2} and len(heard) == 1
    assert kept.skipped == 3 * (len(bad) + 2)
    logged = [r for r in caplog.records if "skipped" in r.getMessage()]
    assert len(logged) == objectives_module.LOGGED  # then counted, not logged
    kept.changed("ADDED", inference_objective("o9", "qwen", 9))  # over the bound: skipped
    assert "o9" not in kept.priorities
    kept.changed("MODIFIED", inference_objective("o1", "qwen", 11))  # a kept one may change
    assert kept.priorities["o1"] == 11 and heard[-1]["o1"] == 11
    kept.changed("BOOKMARK", {})
    kept.changed("DELETED", inference_objective("o0", "qwen", 0))
    assert set(kept.priorities) == {"o1", "o2"}
