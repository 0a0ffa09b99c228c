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
from support.kubeapi import FakeKubeAPI, inference_pool, pod
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


async def test_gateway_follows_the_pool_and_forgets_deleted_pods(tmp_path: Path) -> None:
    hosts = ["127.0.0.2", "127.0.0.3"]
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
