"""One controller behind every transport: an E/PD config charges the encode pod with in-flight
load the same way in the discrete-event benchmark and through the real gateway over HTTP.

A probe plugin (a real ``RequestLifecycle`` plugin in the scheduler config, as any plugin would
be) records, at each request's first token, the in-flight request count of every pod the
request was started on, by profile and role. The same requests go through the DES (virtual clock,
virtual transport, the gateway-orchestrated mode) and through a gateway on loopback in front of
simulated pods, running the legs itself: the two records must be equal. Every image request
charged the encode pod: the gateway, which sends the legs, releases it when its leg has ended
(so at the first token it no longer counts); with the legs left to a sidecar the gateway cannot
see them end, and the encode pod counts the request until the first token.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
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
from mmgate.gateway.app import Running, build_gateway, start
from mmgate.gateway.server import Gateway
from mmgate.scheduling import EndpointState, RequestLifecycle, SchedulingRequest
from mmgate.scheduling.contracts import NoParams, Plugin, PluginHandle
from mmgate.scheduling.registry import builtin_registry
from mmgate.sim.faults import FaultSettings
from mmgate.sim.fleet import SimFleet
from mmgate.sim.roles import Role
from mmgate.sim.spec import PodSpec
from support.processes import REPO
from support.stack import chat_body, png, wait_until_scraped

EXAMPLE = REPO / "examples" / "e-pd.yaml"
ROLES = ("encode", "prefill-decode")
Snapshot = list[tuple[str, str | None, int]]


class LoadProbe(Plugin[NoParams], RequestLifecycle):
    """Per request, at its first token: (profile, role, in-flight requests) of each pod it holds;
    at each stage pod's release: that pod and every held pod's (name, in-flight requests)."""

    type_name = "test-load-probe"

    def __init__(self, name: str, params: NoParams, handle: PluginHandle) -> None:
        super().__init__(name, params, handle)
        self.held: dict[str, list[tuple[str, EndpointState]]] = {}
        self.at_first_token: list[Snapshot] = []
        self.at_stage_done: list[tuple[str, list[tuple[str, int]]]] = []

    def on_started(
        self, request: SchedulingRequest, endpoint: EndpointState, profile: str, now: float
    ) -> None:
        self.held.setdefault(request.request_id, []).append((profile, endpoint))

    def on_stage_done(self, request: SchedulingRequest, endpoint: EndpointState, now: float) -> None:
        held = self.held.get(request.request_id, [])
        self.at_stage_done.append((endpoint.name, sorted((e.name, e.inflight.requests) for _, e in held)))

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


EXPECTED: dict[str, list[Snapshot]] = {
    "gateway": [  # the encode pod was released when its leg ended
        [("decode", "prefill-decode", 1), ("encode", "encode", 0)],
        [("decode", "prefill-decode", 1)],  # text only: no encode stage, no encode load
        [("decode", "prefill-decode", 1), ("encode", "encode", 0)],
        [("decode", "prefill-decode", 1), ("encode", "encode", 0)],
    ],
    "sidecar": [  # the legs are out of the gateway's sight: held until the first token
        [("decode", "prefill-decode", 1), ("encode", "encode", 1)],
        [("decode", "prefill-decode", 1)],
        [("decode", "prefill-decode", 1), ("encode", "encode", 1)],
        [("decode", "prefill-decode", 1), ("encode", "encode", 1)],
    ],
}


def _probe(plugins: Mapping[str, object]) -> LoadProbe:
    probe = plugins["test-load-probe"]
    assert isinstance(probe, LoadProbe)
    return probe


async def _gateway(fleet: SimFleet, orchestrator: str, roles: Sequence[str]) -> tuple[Gateway, Running]:
    config = parse_config(yaml.safe_load(_config_text()), source="<test>")
    endpoints = [EndpointSpec(url=u, role=r) for u, r in zip(fleet.urls, roles, strict=True)]
    disagg = msgspec.structs.replace(config.mmgate.disaggregation, orchestrator=orchestrator)
    section = msgspec.structs.replace(config.mmgate, endpoints=endpoints, port=0, disaggregation=disagg)
    gateway = build_gateway(msgspec.structs.replace(config, mmgate=section), registry=REGISTRY)
    gateway.settings.access_log = False
    running = await start(gateway, port=0)
    await wait_until_scraped(running)
    return gateway, running


def _picker(gateway: Gateway) -> SchedulerPicker:
    picker = gateway.picker
    assert isinstance(picker, SchedulerPicker)
    return picker


async def _over_http(orchestrator: str) -> tuple[list[Snapshot], list[int]]:
    """The requests one after another through a gateway on loopback in front of simulated pods."""
    specs = [
        PodSpec(name="enc", role=Role.ENCODE, profile="fast"),
        PodSpec(name="pd", role=Role.BOTH, profile="fast"),
    ]
    async with SimFleet(specs) as fleet:
        gateway, running = await _gateway(fleet, orchestrator, ROLES)
        try:
            async with aiohttp.ClientSession() as session:
                for body in _requests(fleet["pd"].model):
                    async with session.post(running.url + "/v1/chat/completions", data=body) as r:
                        assert r.status == 200
                        await r.read()
            picker = _picker(gateway)
            left = [s.inflight.requests for s in picker.states.values()]
            return _probe(picker.scheduler.plugins).at_first_token, left
        finally:
            await running.stop()


async def test_des_charges_the_encode_pod_like_the_http_gateway(tmp_path: Path) -> None:
    http, http_left = await _over_http("gateway")
    sidecar, sidecar_left = await _over_http("sidecar")

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

    assert des == http == EXPECTED["gateway"]
    assert sidecar == EXPECTED["sidecar"]
    assert des_left == http_left == sidecar_left == [0, 0]  # and released when each request ended


async def test_each_encoder_is_released_when_its_own_leg_ends() -> None:
    """Two encoders, one slow: the fast one stops counting the request when its leg is over,
    while the slow one still encodes; the PD pod keeps it until the end."""
    slow = FaultSettings(slowdown=1000.0)  # about 0.7 s for its item: the other leg ends well before
    specs = [
        PodSpec(name="enc-0", role=Role.ENCODE, profile="fast", faults=slow),
        PodSpec(name="enc-1", role=Role.ENCODE, profile="fast"),
        PodSpec(name="pd", role=Role.BOTH, profile="fast"),
    ]
    async with SimFleet(specs) as fleet:
        gateway, running = await _gateway(fleet, "gateway", ("encode", "encode", "prefill-decode"))
        try:
            name = {p.url.split("://", 1)[1]: p.name for p in fleet}
            body = chat_body(fleet["pd"].model, "two", [png(1), png(2)], max_tokens=4, stream=True)
            async with (
                aiohttp.ClientSession() as session,
                session.post(running.url + "/v1/chat/completions", data=body) as r,
            ):
                assert r.status == 200
                await r.read()
            encoders = [fleet[n].encoder for n in ("enc-0", "enc-1")]
            assert [e.encoded_items if e is not None else None for e in encoders] == [1, 1]
            probe = _probe(_picker(gateway).scheduler.plugins)
            seen = [(name[pod], sorted((name[n], k) for n, k in held)) for pod, held in probe.at_stage_done]
            assert seen == [
                ("enc-1", [("enc-0", 1), ("enc-1", 0), ("pd", 1)]),  # enc-0 still encodes its item
                ("enc-0", [("enc-0", 0), ("enc-1", 0), ("pd", 1)]),
            ]
            both = [("decode", "prefill-decode", 1), ("encode", "encode", 0), ("encode", "encode", 0)]
            assert probe.at_first_token == [both]
        finally:
            await running.stop()
