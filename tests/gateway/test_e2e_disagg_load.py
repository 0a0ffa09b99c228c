"""One controller behind every transport: an E/PD config charges the encode pod with in-flight
load as the gateway sees its legs end.

A probe plugin (support.inflight_probe: a real ``RequestLifecycle`` plugin in the scheduler config,
as any plugin would be) records, at each request's first token, the in-flight request count of
every pod the request was started on, by profile and role. Every image request charged the encode
pod: the gateway, which sends the legs, releases it when its leg has ended (so at the first token
it no longer counts); with the legs left to a sidecar that does not say when they end (llm-d's;
here no sidecar at all: ``mmgate sidecar`` says so in a 103, tests/disagg/test_adaptive_e2e.py),
the encode pod counts the request until the first token. The discrete-event benchmark's transport
must record the same (bench/tests/routing/test_des_disagg.py).
"""

from __future__ import annotations

from collections.abc import Sequence

import aiohttp
import msgspec
import yaml

from mmgate.config import parse_config
from mmgate.config.schema import EndpointSpec
from mmgate.control import SchedulerPicker
from mmgate.gateway.app import Running, build_gateway, start
from mmgate.gateway.server import Gateway
from mmgate.sim.faults import FaultSettings
from mmgate.sim.fleet import SimFleet
from mmgate.sim.roles import Role
from mmgate.sim.spec import PodSpec
from support.inflight_probe import EXPECTED, REGISTRY, ROLES, Snapshot, config_text, probe_of, requests
from support.stack import chat_body, png, wait_until_scraped


async def _gateway(fleet: SimFleet, orchestrator: str, roles: Sequence[str]) -> tuple[Gateway, Running]:
    config = parse_config(yaml.safe_load(config_text()), source="<test>")
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
                for body in requests(fleet["pd"].model):
                    async with session.post(running.url + "/v1/chat/completions", data=body) as r:
                        assert r.status == 200
                        await r.read()
            picker = _picker(gateway)
            left = [s.inflight.requests for s in picker.states.values()]
            return probe_of(picker.scheduler.plugins).at_first_token, left
        finally:
            await running.stop()


async def test_the_encode_pod_counts_a_request_until_its_leg_ends_or_its_first_token() -> None:
    http, http_left = await _over_http("gateway")
    sidecar, sidecar_left = await _over_http("sidecar")
    assert http == EXPECTED["gateway"]
    assert sidecar == EXPECTED["sidecar"]
    assert http_left == sidecar_left == [0, 0]  # and released when each request ended


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
            probe = probe_of(_picker(gateway).scheduler.plugins)
            seen = [(name[pod], sorted((name[n], k) for n, k in held)) for pod, held in probe.at_stage_done]
            assert seen == [
                ("enc-1", [("enc-0", 1), ("enc-1", 0), ("pd", 1)]),  # enc-0 still encodes its item
                ("enc-0", [("enc-0", 0), ("enc-1", 0), ("pd", 1)]),
            ]
            both = [("decode", "prefill-decode", 1), ("encode", "encode", 0), ("encode", "encode", 0)]
            assert probe.at_first_token == [both]
        finally:
            await running.stop()
