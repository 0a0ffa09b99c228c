"""The whole stack on loopback for end-to-end tests: a simulated fleet and a gateway built from a
config exactly as ``mmgate serve`` builds it, with helpers that read what a user would read."""

from __future__ import annotations

import base64
import io
import re
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import aiohttp
import msgspec
import orjson
import yaml

from mmgate.config import parse_config
from mmgate.datalayer.endpoints import EndpointRegistry
from mmgate.gateway.app import Running, build_gateway, start
from mmgate.sim.fleet import SimFleet
from support.waiting import until

ROUND_ROBIN = """
apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: round-robin-picker
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: round-robin-picker
"""

ENCODER_AFFINITY = """
apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: token-producer
- type: inflight-load-producer
- type: mm-embeddings-cache-producer
- type: mm-embeddings-cache-scorer
- type: token-load-scorer
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: mm-embeddings-cache-scorer
    weight: 2
  - pluginRef: token-load-scorer
"""


def png(seed: int, size: tuple[int, int] = (320, 240)) -> bytes:
    """A distinct real PNG per seed."""
    from PIL import Image, ImageDraw

    image = Image.new("RGB", size, ((seed * 53) % 256, (seed * 97) % 256, (seed * 31) % 256))
    draw = ImageDraw.Draw(image)
    draw.rectangle([seed % 50, seed % 40, 100 + seed % 70, 90 + seed % 60], fill=(255 - seed % 256, 10, 200))
    out = io.BytesIO()
    image.save(out, format="PNG")
    return out.getvalue()


def data_url(image: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(image).decode()


def chat_body(
    model: str, text: str, images: Sequence[bytes] = (), *, system: str | None = None, **extra: Any
) -> bytes:
    content: list[dict[str, Any]] = [{"type": "text", "text": text}]
    content += [{"type": "image_url", "image_url": {"url": data_url(i)}} for i in images]
    messages: list[dict[str, Any]] = [{"role": "user", "content": content}]
    if system is not None:
        messages.insert(0, {"role": "system", "content": system})
    return orjson.dumps({"model": model, "messages": messages, "max_tokens": 4, **extra})


@dataclass
class Reply:
    status: int
    endpoint: str
    tokens: int
    body: bytes


@dataclass
class Stack:
    fleet: SimFleet
    running: Running
    session: aiohttp.ClientSession

    @property
    def url(self) -> str:
        return self.running.url

    @property
    def model(self) -> str:
        return self.fleet.pods[0].model

    def pod_name(self, endpoint: str) -> str:
        return self.fleet.by_url(f"http://{endpoint}").name

    async def post(self, body: bytes, path: str = "/v1/chat/completions") -> Reply:
        async with self.session.post(self.url + path, data=body) as resp:
            data = await resp.read()
            return Reply(
                resp.status,
                resp.headers.get("x-mmgate-endpoint", ""),
                int(resp.headers.get("x-mmgate-request-tokens", "0")),
                data,
            )

    async def pod_counter(self, endpoint_url: str, name: str) -> float:
        """A counter from a pod's own /metrics, summed over label sets."""
        return await server_counter(self.session, endpoint_url, name)

    async def fleet_counter(self, name: str) -> float:
        return sum([await self.pod_counter(u, name) for u in self.fleet.urls])


async def server_counter(session: aiohttp.ClientSession, url: str, name: str) -> float:
    """A counter (or gauge) from a model server's own /metrics, summed over label sets; 0 when absent."""
    async with session.get(url + "/metrics") as resp:
        text = await resp.text()
    pattern = re.compile(rf"^{re.escape(name)}(?:{{[^}}]*}})? (\S+)$", re.M)
    return sum(float(v) for v in pattern.findall(text))


async def wait_until_scraped(running: Running, timeout: float = 10.0) -> None:
    """Every endpoint has answered a scrape and listed its models."""
    await wait_until_registry_scraped(running.gateway.data.registry, timeout)


async def wait_until_registry_scraped(registry: EndpointRegistry, timeout: float = 10.0) -> None:
    """Every endpoint of ``registry`` has answered a scrape and listed its models (any transport)."""
    await until(
        lambda: all(r.metrics is not None and r.models for r in registry.records()),
        "every endpoint scraped",
        timeout,
    )


@asynccontextmanager
async def stack(
    config_yaml: str,
    *,
    pods: int = 4,
    fleet: SimFleet | None = None,
    extra_endpoints: Sequence[str] = (),
    clock: Callable[[], float] = time.monotonic,
    **sim: Any,
) -> AsyncIterator[Stack]:
    """A started fleet (``fast`` profile unless ``sim`` says otherwise) and a gateway in front
    (on ``clock``)."""
    own_fleet = fleet is None
    if fleet is None:
        sim.setdefault("profile", "fast")
        fleet = SimFleet(pods=pods, **sim)
        await fleet.start()
    config = parse_config(yaml.safe_load(config_yaml), source="<test>")
    section = msgspec.structs.replace(
        config.mmgate, endpoints=[*fleet.urls, *extra_endpoints], port=0, seed=7, accessLog=False
    )
    gateway = build_gateway(msgspec.structs.replace(config, mmgate=section), clock=clock)
    running = await start(gateway, port=0)
    session = aiohttp.ClientSession()
    try:
        await wait_until_scraped(running)
        yield Stack(fleet, running, session)
    finally:
        await session.close()
        await running.stop()
        if own_fleet:
            await fleet.stop()
