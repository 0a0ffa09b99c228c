"""E/PD and E/P/D end to end on loopback, in both ways of running the stages.

``sidecar``: the gateway sets llm-d's routing headers and sends each request to an ``mmgate
sidecar`` in front of the decode (or PD) pod, which runs the legs. ``gateway``: the gateway runs
the legs itself (``mmgate.disaggregation.orchestrator: gateway``). The pods are simulated: encode
pods (``--mm-encoder-only``) answer with ``ec_transfer_params`` and count their encoder-cache
queries, hits and items encoded; a PD pod skips encoding the items it gets parameters for.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import msgspec
import pytest
import yaml
from aiohttp import web

from mmgate.config import parse_config
from mmgate.config.schema import EndpointSpec
from mmgate.disagg.orchestrate import OrchestrationSettings
from mmgate.disagg.sidecar import Sidecar, SidecarSettings
from mmgate.gateway.app import Running, build_gateway, start
from mmgate.sim.faults import FaultSettings
from mmgate.sim.fleet import SimFleet
from mmgate.sim.roles import Role
from mmgate.sim.server import SimPod
from mmgate.sim.spec import PodSpec
from support.processes import REPO
from support.stack import chat_body, png, wait_until_scraped

EXAMPLES = REPO / "examples"
MODES = ["sidecar", "gateway"]
# About 0.8 s per item: the overlap (~1.6 s saved on four) beats the loopback, prefill and decode
# overhead even on a loaded 2-core machine (at 0.25 s per item a run at load 11 took 1.03 s
# against 0.94 s of encoding).
SLOW_ENCODER = FaultSettings(slowdown=1000.0)

ROLE_LABEL = {
    Role.ENCODE: "encode",
    Role.BOTH: "prefill-decode",
    Role.PREFILL: "prefill",
    Role.DECODE: "decode",
}


@dataclass
class Stack:
    fleet: SimFleet
    gateway: Running
    sidecars: list[Sidecar] = field(default_factory=list)

    @property
    def url(self) -> str:
        return self.gateway.url

    def pod(self, name: str) -> SimPod:
        return self.fleet[name]

    def encoded(self, *names: str) -> list[int]:
        return [_encoder(self.pod(n)).encoded_items for n in names]

    def hits(self, *names: str) -> list[int]:
        return [_encoder(self.pod(n)).hits for n in names]

    def queries(self, *names: str) -> list[int]:
        return [_encoder(self.pod(n)).queries for n in names]


def _encoder(pod: SimPod) -> Any:
    assert pod.encoder is not None
    return pod.encoder


def specs(*pods: tuple[str, Role], encoder_faults: FaultSettings | None = None) -> list[PodSpec]:
    out = []
    for name, role in pods:
        faults = encoder_faults if role is Role.ENCODE and encoder_faults is not None else FaultSettings()
        out.append(PodSpec(name=name, role=role, profile="fast", faults=faults))
    return out


@asynccontextmanager
async def stack(
    fleet: SimFleet,
    mode: str,
    example: str,
    *,
    listed: Sequence[str] | None = None,
    fallback: str = "local",
    debug: bool = False,
) -> AsyncIterator[Stack]:
    """A gateway (and, in sidecar mode, one sidecar per decode-side pod) in front of ``fleet``'s
    pods named in ``listed`` (default: all)."""
    doc = yaml.safe_load((EXAMPLES / example).read_text())
    config = parse_config(doc, source=example)
    sidecars: list[Sidecar] = []
    endpoints = []
    stage_hosts = [p.url.split("://", 1)[1] for p in fleet if p.spec.role in (Role.ENCODE, Role.PREFILL)]
    try:
        for pod in fleet:
            if listed is not None and pod.name not in listed:
                continue
            url = pod.url
            if mode == "sidecar" and pod.spec.role in (Role.BOTH, Role.DECODE):
                car = Sidecar(
                    SidecarSettings(
                        upstream=pod.url,
                        allow=stage_hosts,
                        host="127.0.0.1",
                        port=0,
                        admin_port=0,
                        orchestration=OrchestrationSettings(fallback=fallback),  # type: ignore[arg-type]
                    )
                )
                await car.start()
                sidecars.append(car)
                url = car.url
            endpoints.append(EndpointSpec(url=url, role=ROLE_LABEL[pod.spec.role]))
        disagg = msgspec.structs.replace(
            config.mmgate.disaggregation,
            orchestrator="gateway" if mode == "gateway" else "sidecar",
            fallback=fallback,
        )
        section = msgspec.structs.replace(
            config.mmgate, endpoints=endpoints, port=0, disaggregation=disagg, debugHeaders=debug
        )
        gateway = build_gateway(msgspec.structs.replace(config, mmgate=section))
        gateway.settings.access_log = debug
        running = await start(gateway, port=0)
        try:
            await wait_until_scraped(running)
            yield Stack(fleet, running, sidecars)
        finally:
            await running.stop()
    finally:
        for car in sidecars:
            await car.stop()


async def post(url: str, body: bytes, headers: dict[str, str] | None = None) -> tuple[int, dict[str, Any]]:
    async with (
        aiohttp.ClientSession() as session,
        session.post(url + "/v1/chat/completions", data=body, headers=headers or {}) as r,
    ):
        data = await r.read()
        return r.status, msgspec.json.decode(data) if data else {}


async def timed(url: str, body: bytes) -> float:
    started = time.perf_counter()
    status, _ = await post(url, body)
    assert status == 200
    return time.perf_counter() - started


E_PD = (("enc-0", Role.ENCODE), ("enc-1", Role.ENCODE), ("pd-0", Role.BOTH))


@pytest.mark.parametrize("mode", MODES)
async def test_four_images_are_encoded_on_two_encoders_in_parallel(mode: str) -> None:
    async with SimFleet(specs(*E_PD, encoder_faults=SLOW_ENCODER)) as fleet:
        model = fleet["pd-0"].model
        async with stack(fleet, mode, "e-pd.yaml") as s:
            two = await timed(
                s.url, chat_body(model, "compare", [png(i) for i in range(10, 14)], max_tokens=4)
            )
            assert s.encoded("enc-0", "enc-1") == [2, 2]  # two items each, side by side
        spans = {name: _encoder(fleet[name]).spans for name in ("enc-0", "enc-1")}
        # The pods' own record: each encoded its two items, and the two encoders worked at once.
        assert [len(v) for v in spans.values()] == [2, 2]
        assert _overlap(spans["enc-0"], spans["enc-1"]) > 0, spans
        busy = sum(end - start for v in spans.values() for start, end in v)
        # Its wall time shows it: one after the other, the four encodes alone would take ``busy``.
        assert two < busy, (two, spans)
        async with stack(fleet, mode, "e-pd.yaml", listed=("enc-0", "pd-0")) as s:
            one = await timed(
                s.url, chat_body(model, "compare", [png(i) for i in range(20, 24)], max_tokens=4)
            )
            assert s.encoded("enc-0", "enc-1") == [6, 2]  # the four on the only encoder listed
        alone = _encoder(fleet["enc-0"]).spans[-4:]
        assert _overlap(alone[:2], alone[2:]) == 0  # one encoder: one item after another
    assert two < one, (two, one)


def _overlap(a: Sequence[tuple[float, float]], b: Sequence[tuple[float, float]]) -> float:
    """Seconds during which some span of ``a`` and some span of ``b`` both ran."""
    return sum(max(0.0, min(e1, e2) - max(s1, s2)) for s1, e1 in a for s2, e2 in b)


@pytest.mark.parametrize("mode", MODES)
async def test_a_text_only_request_never_touches_an_encoder(mode: str) -> None:
    async with SimFleet(specs(*E_PD)) as fleet, stack(fleet, mode, "e-pd.yaml") as s:
        status, answer = await post(s.url, chat_body(fleet["pd-0"].model, "just words", max_tokens=3))
        assert status == 200 and answer["choices"][0]["message"]["content"]
        assert s.queries("enc-0", "enc-1") == [0, 0]


@pytest.mark.parametrize("mode", MODES)
async def test_an_image_seen_before_is_served_from_the_encoder_that_holds_it(mode: str) -> None:
    async with SimFleet(specs(*E_PD)) as fleet, stack(fleet, mode, "e-pd.yaml") as s:
        body = chat_body(fleet["pd-0"].model, "what is this?", [png(7)], max_tokens=3)
        assert (await post(s.url, body))[0] == 200
        encoded = s.encoded("enc-0", "enc-1")
        assert sorted(encoded) == [0, 1]
        holder = "enc-0" if encoded[0] else "enc-1"
        assert (await post(s.url, chat_body(fleet["pd-0"].model, "and now?", [png(7)], max_tokens=3)))[
            0
        ] == 200
        assert s.encoded("enc-0", "enc-1") == encoded  # encoded by nobody the second time
        assert s.hits(holder) == [1]  # served from the encoder cache of the pod that holds it
        assert fleet["pd-0"].metrics.encoder_s == 0  # the PD pod's own encoder stayed idle both times


@pytest.mark.parametrize("mode", MODES)
async def test_repeated_references_to_one_image_are_encoded_once(mode: str) -> None:
    async with SimFleet(specs(*E_PD)) as fleet, stack(fleet, mode, "e-pd.yaml") as s:
        cat = png(3)
        assert (await post(s.url, chat_body(fleet["pd-0"].model, "twice", [cat, png(4), cat], max_tokens=2)))[
            0
        ] == 200
        assert sum(s.queries("enc-0", "enc-1")) == 2


E_P_D = (("enc-0", Role.ENCODE), ("pre-0", Role.PREFILL), ("dec-0", Role.DECODE))


@pytest.mark.parametrize("mode", MODES)
async def test_e_p_d_prefills_on_the_prefill_pod_and_decodes_on_the_decode_pod(mode: str) -> None:
    async with SimFleet(specs(*E_P_D)) as fleet, stack(fleet, mode, "e-p-d.yaml") as s:
        body = chat_body(fleet["dec-0"].model, "describe", [png(5)], max_tokens=6)
        status, answer = await post(s.url, body)
        assert status == 200
        assert "kv_transfer_params" not in answer and "ec_transfer_params" not in answer
        assert answer["usage"]["completion_tokens"] == 6
        pre, dec = fleet["pre-0"].stats(), fleet["dec-0"].stats()
        assert pre.generation_tokens == 1  # the prefill leg: one token, then the KV goes to decode
        assert dec.generation_tokens == 6
        assert s.encoded("enc-0") == [1]
        assert fleet["pre-0"].metrics.encoder_s == fleet["dec-0"].metrics.encoder_s == 0


@pytest.mark.parametrize("mode", MODES)
async def test_a_failing_encoder_is_retried_on_another_then_falls_back_locally(mode: str) -> None:
    async with SimFleet(specs(*E_PD)) as fleet, stack(fleet, mode, "e-pd.yaml") as s:
        fleet["enc-0"].faults.update({"rate_503": 1.0})
        model = fleet["pd-0"].model
        status, _ = await post(s.url, chat_body(model, "two", [png(30), png(31)], max_tokens=2))
        assert status == 200
        assert s.encoded("enc-0", "enc-1") == [0, 2]  # enc-0's item retried on enc-1
        fleet["enc-1"].faults.update({"rate_503": 1.0})
        assert fleet["pd-0"].metrics.encoder_s == 0
        status, answer = await post(s.url, chat_body(model, "local", [png(32)], max_tokens=2))
        assert status == 200 and answer["choices"]  # not lost: the PD pod encoded it itself
        assert fleet["pd-0"].metrics.encoder_s > 0
        assert s.encoded("enc-0", "enc-1") == [0, 2]


@pytest.mark.parametrize("mode", MODES)
async def test_a_failing_encoder_pool_is_a_clear_503_when_configured(mode: str) -> None:
    async with SimFleet(specs(*E_PD)) as fleet, stack(fleet, mode, "e-pd.yaml", fallback="fail") as s:
        for name in ("enc-0", "enc-1"):
            fleet[name].faults.update({"rate_503": 1.0})
        body = chat_body(fleet["pd-0"].model, "x", [png(40)], max_tokens=2)
        # Through the gateway in both modes: in sidecar mode the sidecar's 503 is the last
        # attempt's answer (the encode pods are candidates the decode filter drops, not retries).
        status, answer = await post(s.url, body)
        assert status == 503
        assert answer["error"]["code"] == "stage_unavailable"
        assert "encode stage is unavailable" in answer["error"]["message"]
        assert fleet["pd-0"].stats().generation_tokens == 0  # nothing was half-served


class Spy:
    """A server that must never be contacted: it counts every request."""

    def __init__(self) -> None:
        self.hits = 0
        self.runner: web.AppRunner | None = None
        self.port = 0

    async def __aenter__(self) -> Spy:
        async def any_request(request: web.Request) -> web.Response:
            self.hits += 1
            return web.json_response({"ec_transfer_params": {}, "kv_transfer_params": {}})

        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", any_request)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        self.port = self.runner.addresses[0][1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.runner is not None
        await self.runner.cleanup()

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"


@pytest.mark.parametrize("mode", MODES)
async def test_spoofed_routing_headers_from_a_client_are_ignored(mode: str) -> None:
    async with SimFleet(specs(*E_PD)) as fleet, stack(fleet, mode, "e-pd.yaml") as s, Spy() as spy:
        spoof = {"x-encoder-hosts-ports": spy.host, "x-prefiller-host-port": spy.host}
        model = fleet["pd-0"].model
        for body in (
            chat_body(model, "text", max_tokens=2),
            chat_body(model, "img", [png(50)], max_tokens=2),
        ):
            status, _ = await post(s.url, body, spoof)
            assert status == 200
        assert spy.hits == 0
        assert sum(s.encoded("enc-0", "enc-1")) == 1  # the gateway's own choice was used


async def test_a_host_not_on_the_sidecars_allow_list_is_never_contacted() -> None:
    async with SimFleet(specs(*E_PD)) as fleet, stack(fleet, "sidecar", "e-pd.yaml") as s, Spy() as spy:
        car = s.sidecars[0]
        spoof = {"x-encoder-hosts-ports": spy.host, "x-prefiller-host-port": spy.host}
        body = chat_body(fleet["pd-0"].model, "direct", [png(60)], max_tokens=2)
        status, answer = await post(car.url, body, spoof)  # straight to the sidecar, past the gateway
        assert status == 200 and answer["choices"]
        assert spy.hits == 0
        async with (
            aiohttp.ClientSession() as session,
            session.get(f"http://127.0.0.1:{car.admin_port}/metrics") as r,
        ):
            metrics = await r.text()
        assert 'mmgate_disagg_refused_hosts_total{stage="encode"} 1.0' in metrics
        assert 'mmgate_disagg_refused_hosts_total{stage="prefill"} 1.0' in metrics


async def test_the_sidecar_has_its_own_health_ready_and_metrics() -> None:
    async with SimFleet(specs(("pd-0", Role.BOTH))) as fleet:
        car = Sidecar(
            SidecarSettings(upstream=fleet["pd-0"].url, allow=[], host="127.0.0.1", port=0, admin_port=0)
        )
        await car.start()
        try:
            async with aiohttp.ClientSession() as session:
                admin = f"http://127.0.0.1:{car.admin_port}"
                for path in ("/health", "/ready"):
                    async with session.get(admin + path) as r:
                        assert r.status == 200
                async with session.get(admin + "/metrics") as r:
                    assert "mmgate_sidecar_requests_total" in await r.text()
                async with session.get(car.url + "/metrics") as r:  # the pod's, passed through
                    assert "vllm:num_requests_waiting" in await r.text()
            await fleet["pd-0"].stop()
            async with (
                aiohttp.ClientSession() as session,
                session.get(f"http://127.0.0.1:{car.admin_port}/ready") as r,
            ):
                assert r.status == 503
        finally:
            await car.stop()


async def test_the_gateways_scrapes_through_the_sidecar_are_probes_not_passthrough() -> None:
    """A gateway scrapes ``/metrics`` and reads ``/v1/models`` through the sidecar many times a
    second: counted as kind="probe", so "passthrough" counts only client requests."""
    async with SimFleet(specs(*E_PD)) as fleet, stack(fleet, "sidecar", "e-pd.yaml") as s:
        car = s.sidecars[0]

        def count(kind: str) -> float:
            return (
                car.registry.get_sample_value(
                    "mmgate_sidecar_requests_total", {"kind": kind, "status": "200"}
                )
                or 0.0
            )

        assert count("probe") >= 2  # the gateway has scraped its metrics and its model list
        assert count("passthrough") == 0
        model = fleet["pd-0"].model
        async with aiohttp.ClientSession() as session:
            async with session.post(s.url + "/tokenize", json={"model": model, "prompt": "hi"}) as r:
                assert r.status == 200
            async with session.head(car.url + "/health") as r:
                assert r.status == 200
        assert count("passthrough") == 1
        status, _ = await post(s.url, chat_body(model, "hello", [png(5)], max_tokens=2))
        assert status == 200 and count("disaggregated") == 1 and count("passthrough") == 1


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["sidecar", "--upstream", "ftp://x:1"], "--upstream must be http://host:port"),
        (["sidecar", "--upstream", "http://127.0.0.1:1", "--allow", "10.0.0.1"], "not a host:port"),
        (["sidecar", "--upstream", "http://127.0.0.1:1", "--stage-retries", "-1"], "whole number"),
    ],
)
def test_sidecar_flag_mistakes_are_a_message_and_exit_2(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from mmgate.cli import main

    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's own refusals
        code = int(exc.code or 0)
    assert code == 2
    assert message in capsys.readouterr().err


P_D = (("pre-0", Role.PREFILL), ("dec-0", Role.DECODE))


@pytest.mark.parametrize("mode", MODES)
async def test_p_d_prefills_a_long_prompt_remotely_and_keeps_a_short_one_local(mode: str) -> None:
    async with SimFleet(specs(*P_D)) as fleet, stack(fleet, mode, "p-d.yaml") as s:
        model = fleet["dec-0"].model
        status, answer = await post(s.url, chat_body(model, "word " * 600, max_tokens=5, stream=False))
        assert status == 200 and answer["usage"]["completion_tokens"] == 5
        assert fleet["pre-0"].stats().generation_tokens == 1  # prefilled there, one token
        assert fleet["dec-0"].stats().generation_tokens == 5
        assert (await post(s.url, chat_body(model, "hi", max_tokens=3)))[0] == 200
        assert fleet["pre-0"].stats().generation_tokens == 1  # a short prompt: no prefill leg
        assert fleet["dec-0"].stats().generation_tokens == 8


@pytest.mark.parametrize("mode", MODES)
async def test_the_encode_choice_is_in_a_debug_header_the_access_log_and_a_metric(
    mode: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="mmgate.access")
    async with SimFleet(specs(*E_PD)) as fleet, stack(fleet, mode, "e-pd-adaptive.yaml", debug=True) as s:
        body = chat_body(fleet["pd-0"].model, "what is this?", [png(70)], max_tokens=2)
        async with (
            aiohttp.ClientSession() as session,
            session.post(s.url + "/v1/chat/completions", data=body, headers={"x-mmgate-debug": "1"}) as r,
        ):
            assert r.status == 200
            outcome, _, reason = r.headers["x-mmgate-encode"].partition("; reason=")
        assert outcome in {"tier", "local", "split"} and reason
        if outcome == "local":
            assert s.queries("enc-0", "enc-1") == [0, 0]  # no encode leg: the PD pod encoded it
        else:
            assert sum(s.encoded("enc-0", "enc-1")) == 1
        async with aiohttp.ClientSession() as session, session.get(s.url + "/metrics") as r:
            metrics = await r.text()
        assert f'mmgate_encode_decisions_total{{outcome="{outcome}",reason="{reason}"}} 1.0' in metrics
        assert 'mmgate_tier_replicas{role="encode"} 2.0' in metrics  # the tiers' sizing signals
        assert 'mmgate_tier_desired_replicas{role="prefill-decode"} 1.0' in metrics
        text, _ = await post(s.url, chat_body(fleet["pd-0"].model, "only words", max_tokens=2))
        assert text == 200
    logged = [getattr(rec, "fields", {}) for rec in caplog.records if rec.name == "mmgate.access"]
    assert [(f.get("encode"), f.get("encode_reason")) for f in logged] == [(outcome, reason), (None, None)]


async def test_an_item_named_local_is_encoded_by_the_pd_pod_and_the_rest_by_their_encoders() -> None:
    """A split plan (adaptive-encode-decider): the sidecar sends no leg for the ``local`` entry."""
    async with SimFleet(specs(*E_PD)) as fleet, stack(fleet, "sidecar", "e-pd.yaml") as s:
        enc = fleet["enc-1"].url.split("://", 1)[1]
        body = chat_body(fleet["pd-0"].model, "two", [png(80), png(81)], max_tokens=2)
        status, answer = await post(s.sidecars[0].url, body, {"x-encoder-hosts-ports": f"local,{enc}"})
        assert status == 200 and answer["choices"]
        assert s.encoded("enc-0", "enc-1") == [0, 1]  # the second item on its encoder
        assert fleet["pd-0"].metrics.encoder_s > 0  # the first one encoded where it is consumed
