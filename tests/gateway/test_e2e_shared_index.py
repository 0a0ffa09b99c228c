"""Two gateway processes sharing one real Redis (``mmgate.sharedIndex``): a prefix one of them
routed is routed to the same pod by the other; Redis dying loses no request, and sharing resumes
when it comes back."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import aiohttp
import pytest
import yaml

from mmgate.sim.fleet import SimFleet
from support.processes import ServerProcess
from support.redis_server import RedisServer
from support.stack import chat_body
from support.upstreams import free_port

pytestmark = pytest.mark.slow

PICKER = """
apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: token-producer
- type: approx-prefix-cache-producer
- type: prefix-cache-scorer
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: prefix-cache-scorer
"""


class Gateway(ServerProcess):
    def __init__(self, config: Path, session: aiohttp.ClientSession) -> None:
        port = free_port()
        args = ["serve", "--config", str(config), "--port", str(port)]
        args += ["--no-access-log", "--log-level", "info", "--log-format", "text"]
        super().__init__(args, port, ready_path="/ready")
        self.session = session

    async def route(self, model: str, prefix: int, question: str) -> str:
        """Send a request sharing prefix ``prefix``; the endpoint it went to (200 or it fails)."""
        system = f"Conversation {prefix}. " + " ".join(
            f"rule {prefix}.{k}: answer briefly." for k in range(60)
        )
        async with self.session.post(
            self.url + "/v1/chat/completions", data=chat_body(model, question, system=system)
        ) as resp:
            assert resp.status == 200, await resp.text()
            return resp.headers["x-mmgate-endpoint"]

    async def metric(self, name: str) -> float:
        async with self.session.get(self.url + "/metrics") as resp:
            text = await resp.text()
        found = re.findall(rf"^{re.escape(name)} (\S+)$", text, re.M)
        return float(found[0]) if found else -1.0

    async def until(self, name: str, wanted: Callable[[float], bool], what: str) -> None:
        """Wait for the background sync (the limit only catches a hang)."""
        for _ in range(600):
            if wanted(await self.metric(name)):
                return
            await asyncio.sleep(0.05)
        raise AssertionError(f"{name} never {what} on {self.url}")


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as s:
        yield s


APPLIED = 'mmgate_shared_index_changes_total{result="applied"}'


async def test_two_gateways_share_affinity_and_survive_redis_going_away(
    tmp_path: Path, redis_server: RedisServer, session: aiohttp.ClientSession
) -> None:
    async with SimFleet(pods=4, profile="fast") as fleet:
        doc = yaml.safe_load(PICKER)
        doc["mmgate"] = {"endpoints": fleet.urls, "sharedIndex": {"redis": redis_server.url}}
        config = tmp_path / "shared.yaml"
        config.write_text(yaml.safe_dump(doc))
        model = fleet.pods[0].model
        a, b = Gateway(config, session), Gateway(config, session)
        logs: list[str] = []
        try:
            await a.ready(session)
            await b.ready(session)
            for gw in (a, b):
                await gw.until("mmgate_shared_index_up", lambda v: v == 1, "connected")

            # 1. What a routed is what b routes: 6 prefixes, each a 1-in-4 guess without sharing.
            first = {p: await a.route(model, p, "first question?") for p in range(6)}
            await b.until(APPLIED, lambda v: v >= 6, "applied a's 6 changes")
            assert {p: await b.route(model, p, "another question?") for p in range(6)} == first
            assert await a.metric('mmgate_shared_index_round_trips_total{kind="write"}') >= 1

            # 2. Redis dies mid-run: every request is still answered, on the local view; the
            # outage shows in the metrics of both.
            redis_server.kill()
            routed = [await b.route(model, p, "while redis is down?") for p in range(6, 10)]
            routed += [await b.route(model, p, "while redis is down, again?") for p in range(6, 10)]
            assert routed[:4] == routed[4:]  # b's own view keeps its affinity meanwhile
            for gw in (a, b):
                await gw.until("mmgate_shared_index_up", lambda v: v == 0, "noticed the outage")
            before = await b.metric(APPLIED)  # a queued nothing, so b applies only what follows

            # 3. Redis returns (empty): both reconnect, and new affinity is shared again.
            redis_server.start()
            for gw in (a, b):
                await gw.until("mmgate_shared_index_up", lambda v: v == 1, "reconnected")
            later = {p: await a.route(model, p, "after the outage?") for p in range(20, 26)}
            await b.until(APPLIED, lambda v: v >= before + 6, "applied a's new changes")
            assert {p: await b.route(model, p, "after the outage, again?") for p in range(20, 26)} == later
        finally:
            logs = [a.stop(), b.stop()]
    assert all("shared index unavailable" in log for log in logs)
    assert all("shared index connected" in log for log in logs)
