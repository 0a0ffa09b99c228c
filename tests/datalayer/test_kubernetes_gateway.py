"""The gateway routing to an InferencePool's pods found through the Kubernetes API protocol.

Each "pod" is a simulated model server on its own loopback address (127.0.0.2, 127.0.0.3, ...)
with the same port, as pods share a container port in a cluster.
"""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import aiohttp
import msgspec
import orjson
import yaml

from mmgate.config import parse_config
from mmgate.gateway.app import build_gateway, start
from mmgate.sim.fleet import SimFleet
from mmgate.sim.spec import PodSpec
from support.flow import flow_config
from support.kubeapi import FakeKubeAPI, inference_objective, inference_pool, pod
from support.stack import ROUND_ROBIN
from support.waiting import until


def shared_port(hosts: list[str]) -> int:
    """A port free on every one of ``hosts`` (loopback addresses)."""
    for _ in range(20):
        probe = socket.socket()
        probe.bind((hosts[0], 0))
        port = int(probe.getsockname()[1])
        probe.close()
        ok = True
        for host in hosts[1:]:
            s = socket.socket()
            try:
                s.bind((host, port))
            except OSError:
                ok = False
            finally:
                s.close()
        if ok:
            return port
    raise RuntimeError("no shared free port")


async def pool_of_pods(hosts: list[str], tmp_path: Path) -> tuple[FakeKubeAPI, SimFleet, int, Path]:
    """A started simulated pod on each of ``hosts`` (one shared port), and a started API server
    whose InferencePool ``vlm`` selects them; a kubeconfig file pointing at it."""
    port = shared_port(hosts)
    fleet = SimFleet(
        [PodSpec(name=f"pod-{i}", host=h, port=port, profile="fast") for i, h in enumerate(hosts)]
    )
    api = FakeKubeAPI()
    await api.start()
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(api.kubeconfig())
    await fleet.start()
    await api.put("inferencepools", inference_pool("vlm", {"app": "vllm"}, [port]))
    for i, host in enumerate(hosts):
        await api.put("pods", pod(f"vllm-{i}", host, labels={"app": "vllm"}))
    return api, fleet, port, kubeconfig


async def test_gateway_follows_the_pool_and_forgets_deleted_pods(tmp_path: Path) -> None:
    hosts = ["127.0.0.2", "127.0.0.3"]
    api, fleet, port, kubeconfig = await pool_of_pods(hosts, tmp_path)

    doc = yaml.safe_load(ROUND_ROBIN)
    doc["mmgate"] = {
        "port": 0,
        "kubernetes": {"namespace": "ns", "inferencePool": "vlm", "kubeconfig": str(kubeconfig)},
    }
    config = parse_config(doc, source="<test>")
    gateway = build_gateway(msgspec.structs.replace(config, mmgate=config.mmgate))
    gateway.settings.access_log = False
    running = await start(gateway, port=0)
    registry = running.gateway.data.registry
    expected = {f"{h}:{port}" for h in hosts}
    try:
        await until(lambda: {r.name for r in registry.records()} == expected, "both pods discovered")
        await until(lambda: all(r.models for r in registry.records()), "both pods scraped")
        body = orjson.dumps(
            {"model": fleet.pods[0].model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
        )
        async with aiohttp.ClientSession() as session:

            async def served_by() -> str:
                async with session.post(running.url + "/v1/chat/completions", data=body) as resp:
                    assert resp.status == 200, await resp.text()
                    return resp.headers["x-mmgate-endpoint"]

            seen = {await served_by() for _ in range(6)}
            assert seen == expected

            await api.delete("pods", "vllm-1")  # scaled down: the pod leaves the pool
            await until(lambda: {r.name for r in registry.records()} == {f"127.0.0.2:{port}"}, "pod removed")
            after = [await served_by() for _ in range(4)]
            assert set(after) == {f"127.0.0.2:{port}"}
            async with session.get(running.url + "/ready") as resp:
                ready = await resp.json()
            assert set(ready["endpoints"]) == {f"127.0.0.2:{port}"}
    finally:
        await running.stop()
        await fleet.stop()
        await api.stop()
        await asyncio.sleep(0)


async def test_flow_control_takes_the_pools_inference_objectives(tmp_path: Path) -> None:
    api, fleet, _, kubeconfig = await pool_of_pods(["127.0.0.2"], tmp_path)
    await api.put("inferenceobjectives", inference_objective("premium", "vlm", 10))
    await api.put("inferenceobjectives", inference_objective("standard", "vlm", 3))  # over the file's

    doc = yaml.safe_load(flow_config())
    doc["mmgate"]["port"] = 0
    doc["mmgate"]["kubernetes"] = {"namespace": "ns", "inferencePool": "vlm", "kubeconfig": str(kubeconfig)}
    gateway = build_gateway(parse_config(doc, source="<test>"))
    gateway.settings.access_log = False
    running = await start(gateway, port=0)
    flow = running.gateway.controller.flow
    assert flow is not None
    try:
        await until(lambda: "premium" in flow.classifier.objectives, "the objectives listed")
        assert flow.classifier.objectives["standard"].priority == 3  # the resource wins
        assert flow.classifier.objectives["critical"].priority == 10  # the file's others stay
        records = running.gateway.data.registry.records
        await until(lambda: len(records()) == 1 and all(r.models for r in records()), "the pod scraped")
        body = orjson.dumps(
            {"model": fleet.pods[0].model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
        )
        async with aiohttp.ClientSession() as session:
            for objective in ("premium", "standard"):
                headers = {"x-gateway-inference-objective": objective}
                url = running.url + "/v1/chat/completions"
                async with session.post(url, data=body, headers=headers) as r:
                    assert r.status == 200, await r.text()
        assert flow.dispatcher.stats.dispatched == {10: 1, 3: 1}
    finally:
        await running.stop()
        await fleet.stop()
        await api.stop()
        await asyncio.sleep(0)
