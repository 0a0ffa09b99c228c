"""Kubernetes discovery against a loopback server speaking the API's list/watch protocol, through
the real ``kubernetes_asyncio`` client and a real kubeconfig file."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from mmgate.datalayer.endpoints import Endpoint, EndpointRegistry, parse_endpoint
from mmgate.datalayer.kubernetes import (
    KubernetesDiscovery,
    KubernetesSettings,
    endpoints_of_pod,
    pool_target,
)
from support.kubeapi import FakeKubeAPI, inference_pool, pod
from support.waiting import until

APP = {"app": "vllm"}


@pytest.fixture
def kubeconfig(api: FakeKubeAPI, tmp_path: Path) -> str:
    path = tmp_path / "kubeconfig"
    path.write_text(api.kubeconfig())
    return str(path)


def names(registry: EndpointRegistry) -> set[str]:
    return {r.name for r in registry.records()}


async def started(
    settings: KubernetesSettings, static: tuple[Endpoint, ...] = ()
) -> tuple[KubernetesDiscovery, EndpointRegistry]:
    registry = EndpointRegistry()
    source = KubernetesDiscovery(settings, static=static)
    await source.start(registry)
    await asyncio.wait_for(source.synced.wait(), 10)
    return source, registry


async def test_pods_appear_change_role_become_unready_and_disappear(
    api: FakeKubeAPI, kubeconfig: str
) -> None:
    await api.put("pods", pod("a", "10.1.0.1", labels={**APP, "llm-d.ai/role": "decode"}))
    await api.put("pods", pod("other", "10.1.0.9", labels={"app": "something-else"}))
    settings = KubernetesSettings(
        namespace="ns", pod_selector="app=vllm", target_ports=(8000,), kubeconfig=kubeconfig
    )
    source, registry = await started(settings)
    removed: list[str] = []
    registry.on_remove(lambda e: removed.append(e.name))
    try:
        assert names(registry) == {"10.1.0.1:8000"}
        record = registry.get("10.1.0.1:8000")
        assert record is not None and record.endpoint.role == "decode"

        await until(lambda: api.watches >= 1, "a watch")
        await api.put("pods", pod("b", "10.1.0.2", labels=APP))
        await until(lambda: "10.1.0.2:8000" in names(registry), "pod b added")

        await api.put("pods", pod("a", "10.1.0.1", labels={**APP, "llm-d.ai/role": "prefill"}))
        await until(
            lambda: (r := registry.get("10.1.0.1:8000")) is not None and r.endpoint.role == "prefill",
            "pod a's role to change",
        )

        await api.put("pods", pod("b", "10.1.0.2", labels=APP, ready=False))
        await until(lambda: "10.1.0.2:8000" not in names(registry), "unready pod b removed")
        assert removed == ["10.1.0.2:8000"]  # removal listeners (every index) heard of it

        await api.put("pods", pod("a", "10.1.0.1", labels=APP, deleting=True))
        await until(lambda: not names(registry), "terminating pod a removed")
        await api.put("pods", pod("c", None, labels=APP))  # scheduled, no IP yet: not an endpoint
        await api.put("pods", pod("d", "10.1.0.4", labels=APP))
        await until(lambda: names(registry) == {"10.1.0.4:8000"}, "pod d")
        await api.delete("pods", "d")
        await until(lambda: not names(registry), "deleted pod d removed")
    finally:
        await source.stop()


async def test_410_gone_relists_without_dropping_known_endpoints(api: FakeKubeAPI, kubeconfig: str) -> None:
    await api.put("pods", pod("a", "10.2.0.1", labels=APP))
    await api.put("pods", pod("b", "10.2.0.2", labels=APP))
    settings = KubernetesSettings(
        namespace="ns", pod_selector="app=vllm", target_ports=(8000,), kubeconfig=kubeconfig
    )
    source, registry = await started(settings)
    removed: list[str] = []
    registry.on_remove(lambda e: removed.append(e.name))
    try:
        await until(lambda: api.watches >= 1, "a watch")
        await api.bookmark()  # a bookmark moves the client's version without touching endpoints
        await api.delete("pods", "b")  # ... while b is deleted and history is compacted away
        await api.compact()
        await until(lambda: source.relists >= 1, "a relist after 410 Gone")
        await until(lambda: names(registry) == {"10.2.0.1:8000"}, "the relisted set")
        assert removed == ["10.2.0.2:8000"]  # a stayed registered across the resync
        await api.put("pods", pod("c", "10.2.0.3", labels=APP))
        await until(lambda: "10.2.0.3:8000" in names(registry), "watching again after the relist")
    finally:
        await source.stop()


async def test_inference_pool_gives_selector_and_one_endpoint_per_port(
    api: FakeKubeAPI, kubeconfig: str
) -> None:
    await api.put("inferencepools", inference_pool("qwen", {"model": "qwen"}, [8000]))
    await api.put("pods", pod("q1", "10.3.0.1", labels={"model": "qwen"}))
    await api.put("pods", pod("l1", "10.3.0.2", labels={"model": "llama"}))
    static = (parse_endpoint("127.0.0.1:9999"),)
    settings = KubernetesSettings(namespace="ns", pool="qwen", kubeconfig=kubeconfig)
    source, registry = await started(settings, static)
    try:
        assert names(registry) == {"10.3.0.1:8000", "127.0.0.1:9999"}
        # The pool is edited: another selector and two ports. The pods are listed again at once.
        await api.put("inferencepools", inference_pool("qwen", {"model": "llama"}, [8000, 8001]))
        await until(
            lambda: names(registry) == {"10.3.0.2:8000", "10.3.0.2:8001", "127.0.0.1:9999"},
            "the new selector",
        )
        assert source.target is not None and source.target.ports == (8000, 8001)
    finally:
        await source.stop()


async def test_unreachable_api_keeps_static_endpoints_and_recovers(tmp_path: Path) -> None:
    server = FakeKubeAPI()
    await server.start()
    path = tmp_path / "kubeconfig"
    path.write_text(server.kubeconfig())
    await server.put("pods", pod("a", "10.4.0.1", labels=APP))
    settings = KubernetesSettings(
        namespace="ns", pod_selector="app=vllm", target_ports=(8000,), kubeconfig=str(path)
    )
    source, registry = await started(settings)
    try:
        assert names(registry) == {"10.4.0.1:8000"}
        await server.stop()  # the API server goes away: what is known stays routable
        await asyncio.sleep(0.3)
        assert names(registry) == {"10.4.0.1:8000"}
    finally:
        await source.stop()


def test_pool_and_pod_parsing_rules() -> None:
    target = pool_target(inference_pool("p", {"b": "2", "a": "1"}, [8000]))
    assert target.selector == "a=1,b=2" and target.ports == (8000,)
    with pytest.raises(ValueError, match="matchLabels"):
        pool_target(inference_pool("p", {}, [8000]))
    with pytest.raises(ValueError, match=r"targetPorts\[0\]"):
        pool_target({"spec": {"selector": {"matchLabels": APP}, "targetPorts": [{"number": 0}]}})
    ipv6 = endpoints_of_pod(pod("x", "fd00::5", labels=APP), [8000])
    assert [e.name for e in ipv6] == ["[fd00::5]:8000"]
    assert endpoints_of_pod(pod("x", "10.0.0.1", ready=False), [8000]) == []
    with pytest.raises(ValueError, match="exactly one"):
        KubernetesSettings(pod_selector="app=x", target_ports=(1,), pool="p")
    with pytest.raises(ValueError, match="targetPorts"):
        KubernetesSettings(pod_selector="app=x")


def test_serve_without_a_usable_kubeconfig_says_what_to_give(tmp_path: Path) -> None:
    import subprocess

    from support.processes import mmgate_command, subprocess_env

    missing = tmp_path / "nope"
    result = subprocess.run(
        mmgate_command("serve", "--pool-name", "qwen", "--kubeconfig", str(missing), "--port", "0"),
        capture_output=True,
        text=True,
        env=subprocess_env(),
        timeout=60,
    )
    assert result.returncode == 2
    assert "mmgate.kubernetes" in result.stderr and "--kubeconfig" in result.stderr
    assert "Traceback" not in result.stderr
