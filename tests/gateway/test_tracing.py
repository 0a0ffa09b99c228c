"""OpenTelemetry tracing over real HTTP: a client's W3C trace continued through the gateway to the
pods (every attempt and every disaggregated leg carrying the gateway's ``traceparent``), spans
exported over OTLP/HTTP to a real receiver on loopback; and with tracing off, the client's headers
untouched and OpenTelemetry never loaded."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import aiohttp
import msgspec
import pytest
import yaml

from mmgate.config import ConfigError, parse_config
from mmgate.config.schema import EndpointSpec, TracingSpec
from mmgate.datalayer.endpoints import parse_endpoint
from mmgate.datalayer.layer import DataLayerConfig
from mmgate.gateway.app import build_gateway, start, tracing_import_problem
from mmgate.gateway.cli import add_arguments, load
from mmgate.gateway.proxy import ProxySettings
from mmgate.gateway.server import Gateway, GatewaySettings
from mmgate.gateway.tracing import Tracing, TracingSettings, traces_url
from mmgate.sim.fleet import SimFleet
from mmgate.sim.roles import Role
from mmgate.sim.spec import PodSpec
from support.otlp import ExportedSpan, OtlpReceiver
from support.processes import REPO, subprocess_env
from support.stack import ROUND_ROBIN, chat_body, png, stack
from support.upstreams import OrderRouter, Upstream, status_behaviour, tiny_parse
from support.waiting import until

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
CLIENT_SPAN = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{CLIENT_SPAN}-01"
CLIENT_TRACE = {"traceparent": TRACEPARENT, "tracestate": "vendor=opaque1"}
ROOT = "POST /v1/chat/completions"


def traced(config: str, receiver: OtlpReceiver) -> str:
    doc = yaml.safe_load(config)
    doc["mmgate"] = {"tracing": {"endpoint": receiver.url, "serviceName": "mmgate-test"}}
    return yaml.safe_dump(doc)


def only(spans: list[ExportedSpan], name: str) -> ExportedSpan:
    found = [s for s in spans if s.name == name]
    assert len(found) == 1, [s.name for s in spans]
    return found[0]


async def test_the_gateway_continues_the_client_trace_and_the_pod_sees_its_attempt_span() -> None:
    with OtlpReceiver() as otlp:
        async with stack(traced(ROUND_ROBIN, otlp), pods=2) as s:
            body = chat_body(s.model, "what is in the picture?", [png(3)])
            async with s.session.post(s.url + "/v1/chat/completions", data=body, headers=CLIENT_TRACE) as r:
                answer = await r.read()
                assert r.status == 200, answer
                endpoint = r.headers["x-mmgate-endpoint"]
                priced = int(r.headers["x-mmgate-request-tokens"])
            model = s.model
            pod = s.fleet.by_url(f"http://{endpoint}")
            other = next(p for p in s.fleet.pods if p is not pod)
        # the gateway stopped: its last spans were exported on the way out
    assert otlp.paths and set(otlp.paths) == {"/v1/traces"}
    root = only(otlp.spans, ROOT)
    assert (root.trace_id, root.parent_id, root.kind) == (TRACE_ID, CLIENT_SPAN, "server")
    assert root.service == "mmgate-test" and root.status == "unset"
    assert root.attributes["http.response.status_code"] == 200
    assert root.attributes["gen_ai.request.model"] == model
    steps = otlp.children(root)
    assert sorted(c.name for c in steps) == ["decide", "parse", "upstream"]
    parse = only(steps, "parse")
    assert parse.attributes["mmgate.media.image"] == 1
    decide = only(steps, "decide")
    assert decide.attributes["mmgate.endpoint"] == endpoint
    assert decide.attributes["mmgate.request_tokens"] == priced
    assert decide.attributes["mmgate.tokens.image"] > 0 and decide.attributes["mmgate.candidates"] == 2
    assert decide.attributes["mmgate.profile"] == "default"
    upstream = only(steps, "upstream")
    assert upstream.kind == "client" and upstream.attributes["server.port"] == int(endpoint.split(":")[1])
    assert sorted(c.name for c in otlp.children(upstream)) == ["first_byte", "relay"]
    relay = only(otlp.children(upstream), "relay")
    assert relay.attributes["http.response.status_code"] == 200
    assert relay.attributes["mmgate.bytes_sent"] == len(answer)
    assert parse.start_ns < decide.start_ns < upstream.start_ns  # the steps in their order
    # The pod got the gateway's attempt span as its parent (same trace, the client's flags).
    assert pod.trace_parents == (f"00-{TRACE_ID}-{upstream.span_id}-01",)
    assert other.trace_parents == ()
    # Never a payload in an attribute.
    assert not any("base64" in str(v) for span in otlp.spans for v in span.attributes.values())


async def test_each_attempt_is_a_span_and_carries_its_own_traceparent_upstream() -> None:
    sick, well = Upstream(), Upstream()
    sick.behaviour = status_behaviour(503)
    await sick.start()
    await well.start()
    with OtlpReceiver() as otlp:
        settings = GatewaySettings(
            data=DataLayerConfig(endpoints=[parse_endpoint(u.address) for u in (sick, well)]),
            proxy=ProxySettings(),
            access_log=False,
        )
        tracing = Tracing(TracingSettings(endpoint=otlp.url))
        gateway = Gateway(
            settings, OrderRouter(order=[sick.address, well.address]), tiny_parse, tracing=tracing
        )
        running = await start(gateway, "127.0.0.1", 0)
        try:
            async with (
                aiohttp.ClientSession() as session,
                session.post(
                    running.url + "/v1/chat/completions", data=b'{"model": "m"}', headers=CLIENT_TRACE
                ) as r,
            ):
                assert r.status == 200
        finally:
            await running.stop()
            await sick.stop()
            await well.stop()
    root = only(otlp.spans, ROOT)
    first, second = sorted(otlp.named("upstream"), key=lambda s: s.start_ns)
    assert first.parent_id == second.parent_id == root.span_id
    assert (first.status, first.attributes["error.type"], first.attributes["mmgate.attempt"]) == (
        "error",
        "503",
        1,
    )
    assert (second.status, second.attributes["mmgate.attempt"]) == ("unset", 2)
    assert [h["traceparent"] for h in sick.headers] == [f"00-{TRACE_ID}-{first.span_id}-01"]
    assert [h["traceparent"] for h in well.headers] == [f"00-{TRACE_ID}-{second.span_id}-01"]
    assert {h["tracestate"] for h in [*sick.headers, *well.headers]} == {"vendor=opaque1"}
    assert len(otlp.named("decide")) == 2 and root.status == "unset"


async def test_a_refused_request_is_a_trace_whose_parse_span_names_the_field() -> None:
    with OtlpReceiver() as otlp:
        async with stack(traced(ROUND_ROBIN, otlp), pods=1) as s:
            no_model = b'{"messages": [{"role": "user", "content": "hi"}]}'
            async with s.session.post(s.url + "/v1/chat/completions", data=no_model) as r:
                assert r.status == 400
    root = only(otlp.spans, ROOT)
    assert root.parent_id == "" and root.attributes["http.response.status_code"] == 400
    assert root.status == "unset" and root.attributes["error.type"] == "400"  # the client's mistake
    parse = only(otlp.children(root), "parse")
    assert parse.status == "error" and parse.attributes["mmgate.error.param"] == "model"
    assert [c.name for c in otlp.children(root)] == ["parse"]


async def test_every_disaggregated_leg_carries_the_attempt_traceparent() -> None:
    pods = [
        PodSpec(name="enc-0", role=Role.ENCODE, profile="fast"),
        PodSpec(name="pd-0", role=Role.BOTH, profile="fast"),
    ]
    roles = {Role.ENCODE: "encode", Role.BOTH: "prefill-decode"}
    with OtlpReceiver() as otlp:
        async with SimFleet(pods) as fleet:
            config = parse_config(
                yaml.safe_load((REPO / "examples" / "e-pd.yaml").read_text()), source="e-pd"
            )
            section = config.mmgate
            section = msgspec.structs.replace(
                section,
                endpoints=[EndpointSpec(url=p.url, role=roles[p.spec.role]) for p in fleet],
                port=0,
                accessLog=False,
                disaggregation=msgspec.structs.replace(section.disaggregation, orchestrator="gateway"),
                tracing=TracingSpec(endpoint=otlp.url),
            )
            running = await start(build_gateway(msgspec.structs.replace(config, mmgate=section)), port=0)
            try:
                await until(lambda: all(r.models for r in running.gateway.data.registry.records()), "scraped")
                body = chat_body(fleet["pd-0"].model, "describe", [png(5), png(6)], max_tokens=3)
                async with (
                    aiohttp.ClientSession() as session,
                    session.post(running.url + "/v1/chat/completions", data=body, headers=CLIENT_TRACE) as r,
                ):
                    assert r.status == 200, await r.text()
            finally:
                await running.stop()
            encoder, decoder = fleet["enc-0"], fleet["pd-0"]
    upstream = only(otlp.spans, "upstream")
    mine = f"00-{TRACE_ID}-{upstream.span_id}-01"
    assert encoder.trace_parents == (mine, mine)  # one encode leg per image
    assert decoder.trace_parents == (mine,)
    decide = only(otlp.spans, "decide")
    host = encoder.url.split("://", 1)[1]
    assert decide.attributes["mmgate.encode_endpoints"] == f"{host},{host}"  # the encoder of each item


async def test_with_tracing_off_the_client_traceparent_reaches_the_pod_unchanged() -> None:
    async with stack(ROUND_ROBIN, pods=1) as s:
        assert not s.running.gateway.controller.tracing
        async with s.session.post(
            s.url + "/v1/chat/completions", data=chat_body(s.model, "hi"), headers=CLIENT_TRACE
        ) as r:
            assert r.status == 200
        assert s.fleet.pods[0].trace_parents == (TRACEPARENT,)


OFF_SCRIPT = textwrap.dedent(
    """
    import asyncio, json, sys
    import aiohttp, msgspec, yaml
    from mmgate.config import parse_config
    from mmgate.gateway.app import build_gateway, start, tracing_import_problem
    from mmgate.sim.fleet import SimFleet

    async def main():
        async with SimFleet(pods=1, profile="fast") as fleet:
            config = parse_config(yaml.safe_load(sys.argv[1]), source="<test>")
            section = msgspec.structs.replace(config.mmgate, endpoints=fleet.urls, port=0, accessLog=False)
            running = await start(build_gateway(msgspec.structs.replace(config, mmgate=section)), port=0)
            try:
                while not all(r.models for r in running.gateway.data.registry.records()):
                    await asyncio.sleep(0.02)
                ask = [{"role": "user", "content": "hi"}]
                body = json.dumps({"model": fleet.pods[0].model, "messages": ask, "max_tokens": 2})
                async with aiohttp.ClientSession() as session:
                    async with session.post(running.url + "/v1/chat/completions", data=body,
                                            headers={"traceparent": sys.argv[2]}) as r:
                        status = r.status
            finally:
                await running.stop()
            tracing = ("opentelemetry", "mmgate.gateway.tracing")
            loaded = sorted(m for m in sys.modules if m.startswith(tracing))
            print(json.dumps({"status": status, "loaded": loaded, "seen": list(fleet.pods[0].trace_parents)}))

    asyncio.run(main())
    """
)


def test_with_tracing_off_opentelemetry_is_never_imported_and_nothing_is_exported() -> None:
    with OtlpReceiver() as otlp:
        # The SDK's variables point at the receiver: a gateway that honoured them while off would export.
        env = subprocess_env(OTEL_EXPORTER_OTLP_ENDPOINT=otlp.url, OTEL_TRACES_EXPORTER="otlp")
        done = subprocess.run(
            [sys.executable, "-c", OFF_SCRIPT, ROUND_ROBIN, TRACEPARENT],
            env=env, capture_output=True, text=True, timeout=90, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        report = json.loads(done.stdout.strip().splitlines()[-1])
        assert report == {"status": 200, "loaded": [], "seen": [TRACEPARENT]}
        assert otlp.exports == 0


@pytest.mark.parametrize(
    ("tracing", "path"),
    [
        ({"sampleRatio": 1.5}, "mmgate.tracing.sampleRatio"),
        ({"endpoint": "collector:4318"}, "mmgate.tracing.endpoint"),
    ],
)
def test_a_bad_tracing_value_is_a_config_error_naming_the_key(tracing: dict[str, object], path: str) -> None:
    doc = yaml.safe_load(ROUND_ROBIN)
    doc["mmgate"] = {"endpoints": ["127.0.0.1:9"], "tracing": tracing}
    with pytest.raises(ConfigError) as refused:
        build_gateway(parse_config(doc, source="t.yaml"))
    assert refused.value.errors[0].path == path


def test_the_collector_base_url_gets_the_otlp_traces_path() -> None:
    assert traces_url("http://collector:4318") == "http://collector:4318/v1/traces"
    assert traces_url("http://collector:4318/") == "http://collector:4318/v1/traces"
    assert traces_url("https://c.example/otlp/v1/traces") == "https://c.example/otlp/v1/traces"


async def test_sampled_out_traces_export_nothing_but_still_propagate_and_a_sampled_client_wins() -> None:
    with OtlpReceiver() as otlp:
        doc = yaml.safe_load(traced(ROUND_ROBIN, otlp))
        doc["mmgate"]["tracing"]["sampleRatio"] = 0.0
        async with stack(yaml.safe_dump(doc), pods=1) as s:
            for headers in ({}, CLIENT_TRACE):
                async with s.session.post(
                    s.url + "/v1/chat/completions", data=chat_body(s.model, "hi"), headers=headers
                ) as r:
                    assert r.status == 200
            pod = s.fleet.pods[0]
    fresh, continued = pod.trace_parents
    assert int(fresh.rsplit("-", 1)[1], 16) & 1 == 0 and TRACE_ID not in fresh  # new, named, not sampled
    assert continued.startswith(f"00-{TRACE_ID}-") and continued.endswith("-01")
    assert {span.trace_id for span in otlp.spans} == {TRACE_ID}  # only the client's sampled trace


def test_the_serve_flag_turns_tracing_on_and_keeps_the_file_s_other_keys(tmp_path: Path) -> None:
    config = tmp_path / "gw.yaml"
    config.write_text(
        "mmgate:\n  endpoints: [127.0.0.1:9]\n  tracing: {serviceName: edge, sampleRatio: 0.25}\n"
    )
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(["--config", str(config), "--otlp-traces-endpoint", "http://127.0.0.1:4318"])
    loaded = load(args)
    assert loaded.mmgate.tracing == TracingSpec(
        endpoint="http://127.0.0.1:4318", serviceName="edge", sampleRatio=0.25
    )
    assert build_gateway(loaded).controller.tracing
    assert not build_gateway(load(parser.parse_args(["--endpoints", "127.0.0.1:9"]))).controller.tracing


def test_a_clobbered_opentelemetry_install_says_how_to_repair_it() -> None:
    """xds-protos (extproc) overwrites opentelemetry-proto's modules with older copies when pip
    installs it last: the error names the repair, not a missing extra."""
    clobbered = ImportError(
        "cannot import name 'InstrumentationScope' from 'opentelemetry.proto.common.v1.common_pb2'",
        name="opentelemetry.proto.common.v1.common_pb2",
    )
    assert "pip install --force-reinstall --no-deps opentelemetry-proto" in tracing_import_problem(clobbered)
    missing = ImportError("No module named 'opentelemetry'", name="opentelemetry")
    problem = tracing_import_problem(missing)
    assert "opentelemetry is missing" in problem and "mmgate[tracing]" in problem
