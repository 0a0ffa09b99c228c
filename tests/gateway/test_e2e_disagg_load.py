"""One controller behind every transport: an E/PD config charges the encode pod with in-flight
load the same way in the discrete-event benchmark and through the real gateway over HTTP.

A probe plugin (a real ``RequestLifecycle`` plugin in the scheduler config, as any plugin would
be) records, at each request's first token, the in-flight request count of every pod the
request was started on, by profile and role. The same requests go through the DES (virtual clock,
virtual transport) and through a gateway on loopback in front of simulated pods; the two records
must be equal, and every image request must have charged the encode pod.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import aiohttp
import msgspec
import yaml

from mmgate.bench.routing.des import DesOptions, Simulation
from mmgate.bench.routing.records import Ladder
from mmgate.bench.routing.systems import System
from mmgate.bench.workloads.synthetic import RawItem
from mmgate.config import parse_config
from mmgate.config.schema import EndpointSpec
from mmgate.control import SchedulerPicker
from mmgate.gateway.app import build_gateway, start
from mmgate.scheduling import EndpointState, RequestLifecycle, SchedulingRequest
from mmgate.scheduling.framework import NoParams, Plugin, PluginHandle
from mmgate.scheduling.registry import builtin_registry
from mmgate.sim.fleet import SimFleet
from support.processes import REPO
from support.stack import chat_body, png, wait_until_scraped

EXAMPLE = REPO / "examples" / "e-pd.yaml"
ROLES = ("encode", "prefill-decode")
Snapshot = list[tuple[str, str | None, int]]


class LoadProbe(Plugin[NoParams], RequestLifecycle):
    """Per request, at its first token: (profile, role, in-flight requests) of each pod it holds."""

    type_name = "test-load-probe"

    def __init__(self, name: str, params: NoParams, handle: PluginHandle) -> None:
        super().__init__(name, params, handle)
        self.held: dict[str, list[tuple[str, EndpointState]]] = {}
        self.at_first_token: list[Snapshot] = []

    def on_started(
        self, request: SchedulingRequest, endpoint: EndpointState, profile: str, now: float
    ) -> None:
        self.held.setdefault(request.request_id, []).append((profile, endpoint))

    def on_first_token(self, request: SchedulingRequest, now: float) -> None:
        held = self.held.get(request.request_id, [])
        self.at_first_token.append(sorted((p, e.effective_role, e.inflight.requests) for p, e in held))

    def on_finished(self, request: SchedulingRequest, now: float) -> None:
        self.held.pop(request.request_id, None)


REGISTRY = builtin_registry().with_plugins(LoadProbe)


def _config_text() -> str:
    doc = yaml.safe_load(EXAMPLE.read_text())
    doc["plugins"].append({"type": "test-load-probe"})
    return yaml.safe_dump(doc)


def _requests(model: str) -> list[bytes]:
    cat, dog = png(1, (256, 192)), png(2, (192, 256))
    texts = [("what is this?", [cat]), ("say hello", []), ("and this?", [dog]), ("again?", [cat])]
    return [chat_body(model, text, images, max_tokens=8, stream=True) for text, images in texts]


EXPECTED: list[Snapshot] = [
    [("decode", "prefill-decode", 1), ("encode", "encode", 1)],
    [("decode", "prefill-decode", 1)],  # text only: no encode stage, no encode load
    [("decode", "prefill-decode", 1), ("encode", "encode", 1)],
    [("decode", "prefill-decode", 1), ("encode", "encode", 1)],
]


def _probe(plugins: Mapping[str, object]) -> LoadProbe:
    probe = plugins["test-load-probe"]
    assert isinstance(probe, LoadProbe)
    return probe


async def _over_http() -> tuple[list[Snapshot], list[int]]:
    """The requests one after another through a gateway on loopback in front of simulated pods."""
    async with SimFleet(pods=2, profile="fast") as fleet:
        config = parse_config(yaml.safe_load(_config_text()), source="<test>")
        endpoints = [EndpointSpec(url=u, role=r) for u, r in zip(fleet.urls, ROLES, strict=True)]
        section = msgspec.structs.replace(config.mmgate, endpoints=endpoints, port=0)
        gateway = build_gateway(msgspec.structs.replace(config, mmgate=section), registry=REGISTRY)
        gateway.settings.access_log = False
        running = await start(gateway, port=0)
        try:
            await wait_until_scraped(running)
            async with aiohttp.ClientSession() as session:
                for body in _requests(fleet.pods[0].model):
                    async with session.post(running.url + "/v1/chat/completions", data=body) as r:
                        assert r.status == 200
                        await r.read()
            picker = gateway.picker
            assert isinstance(picker, SchedulerPicker)
            left = [s.inflight.requests for s in picker.states.values()]
            return _probe(picker.scheduler.plugins).at_first_token, left
        finally:
            await running.stop()


async def test_des_charges_the_encode_pod_like_the_http_gateway(tmp_path: Path) -> None:
    http, http_left = await _over_http()

    # The DES: the same config and requests, virtual clock and transport.
    path = tmp_path / "e-pd.yaml"
    path.write_text(_config_text())
    options = DesOptions(pods=2, roles=ROLES, profile="fast")
    sim = Simulation(System("e-pd", config=path), options, registry=REGISTRY)
    replay = [RawItem(f"r{i}", body, 8) for i, body in enumerate(_requests("m"))]
    items = iter(replay)
    ladder = Ladder(rates=(0.5,), duration_s=8.0)  # one request every 2 s: each ends before the next
    rung = sim.run_rung(lambda: next(items), 0.5, 8.0, ladder, 0)
    assert [r.error for r in rung.records] == [None] * 4
    des = _probe(sim.scheduler.plugins).at_first_token
    des_left = [s.inflight.requests for s in sim.picker.states.values()]

    assert des == http == EXPECTED
    assert des_left == http_left == [0, 0]  # and released when each request ended
