"""mmgate as Envoy's endpoint picker, through a real Envoy: what a client of the inference
gateway sees, and what mmgate charges."""

from __future__ import annotations

import asyncio
import base64
import re
from collections import Counter

import grpc
import openai
import orjson
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from mmgate.config.schema import TracingSpec
from support.envoy import PROXIES, EnvoyStack, envoy_stack
from support.otlp import OtlpReceiver
from support.stack import ENCODER_AFFINITY, ROUND_ROBIN, chat_body, png

pytestmark = pytest.mark.slow

# The same behaviour behind every proxy configuration in use (see support.envoy.PROXIES).
each_proxy = pytest.mark.parametrize("proxy", list(PROXIES))


async def post(stack: EnvoyStack, body: bytes) -> tuple[int, dict[str, str], bytes]:
    async with stack.session.post(stack.url + "/v1/chat/completions", data=body) as resp:
        return resp.status, {k.lower(): v for k, v in resp.headers.items()}, await resp.read()


def text_body(stack: EnvoyStack, text: str = "hi", **extra: object) -> bytes:
    return orjson.dumps(
        {"model": stack.model, "messages": [{"role": "user", "content": text}], "max_tokens": 3, **extra}
    )


async def metric(stack: EnvoyStack, name: str, **labels: str) -> float:
    async with stack.session.get(stack.admin_url + "/metrics") as resp:
        text = await resp.text()
    total = 0.0
    for line in text.splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        if all(f'{k}="{v}"' in line for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


async def pod_counter(stack: EnvoyStack, endpoint_url: str, name: str) -> float:
    """A counter from a pod's own /metrics, summed over its label sets."""
    async with stack.session.get(endpoint_url + "/metrics") as resp:
        text = await resp.text()
    pattern = re.compile(rf"^{re.escape(name)}(?:{{[^}}]*}})? (\S+)$", re.M)
    return sum(float(v) for v in pattern.findall(text))


@each_proxy
async def test_a_repeated_image_goes_to_the_pod_that_holds_it(proxy: str) -> None:
    async with envoy_stack(ENCODER_AFFINITY, pods=3, proxy=proxy) as stack:
        image = png(11)
        status, first, _ = await post(stack, chat_body(stack.model, "What is this?", [image]))
        assert status == 200
        again = [await post(stack, chat_body(stack.model, f"Question {i}", [image])) for i in range(3)]
        assert {h["x-mmgate-endpoint"] for _, h, _ in again} == {first["x-mmgate-endpoint"]}
        hits = await pod_counter(
            stack, "http://" + first["x-mmgate-endpoint"], "mmgate_sim:encoder_cache_hits_total"
        )
        assert hits >= 3


@each_proxy
async def test_load_spreads_over_the_pods(proxy: str) -> None:
    async with envoy_stack(ROUND_ROBIN, pods=3, proxy=proxy) as stack:
        replies = await asyncio.gather(*(post(stack, text_body(stack, f"q{i}")) for i in range(12)))
        assert all(status == 200 for status, _, _ in replies)
        counts = Counter(h["x-mmgate-endpoint"] for _, h, _ in replies)
        assert len(counts) == 3 and max(counts.values()) - min(counts.values()) <= 1


async def test_two_healthy_pods_behind_llm_d_s_configuration_serve_every_request() -> None:
    # llm-d's standalone chart reads the destination header as one address (ORIGINAL_DST): a
    # fallback list there was "503 no healthy upstream" for every request with two healthy pods.
    async with envoy_stack(ENCODER_AFFINITY, pods=2, proxy="llm-d") as stack:
        bodies = [chat_body(stack.model, f"Question {i}", [png(i % 3)]) for i in range(12)]
        bodies += [text_body(stack, f"t{i}") for i in range(8)]
        replies = await asyncio.gather(*(post(stack, b) for b in bodies))
        assert [s for s, _, _ in replies] == [200] * len(bodies), [d[:200] for _, _, d in replies]
        assert {h["x-mmgate-endpoint"] for _, h, _ in replies} == {
            u.split("://", 1)[1] for u in stack.fleet.urls
        }
        for url in stack.fleet.urls:  # each pod served what mmgate charged it
            served = await pod_counter(stack, url, "vllm:request_success_total")
            assert served == await metric(stack, "mmgate_requests_total", endpoint=url.split("://")[1])


@pytest.mark.parametrize("proxy", ["llm-d", "buffered"])
async def test_the_grpcio_transport_serves_the_same_protocol(proxy: str) -> None:
    async with envoy_stack(ENCODER_AFFINITY, pods=2, proxy=proxy, transport="grpcio") as stack:
        image = png(5)
        replies = [await post(stack, chat_body(stack.model, f"Q{i}", [image])) for i in range(3)]
        assert [s for s, _, _ in replies] == [200] * 3
        assert len({h["x-mmgate-endpoint"] for _, h, _ in replies}) == 1
        status, _, data = await post(stack, b'{"model": "x", "messages": "not a list"}')
        assert status == 400 and orjson.loads(data)["error"]["param"] == "messages"


@each_proxy
async def test_streaming_works_for_the_openai_client(proxy: str) -> None:
    async with envoy_stack(ROUND_ROBIN, proxy=proxy) as stack:
        client = openai.AsyncOpenAI(base_url=stack.url + "/v1", api_key="unused", max_retries=0)
        try:
            stream = await client.chat.completions.create(
                model=stack.model,
                messages=[{"role": "user", "content": "Tell me a story"}],
                max_tokens=8,
                stream=True,
                stream_options={"include_usage": True},
            )
            pieces = []
            usage = None
            async for chunk in stream:
                if chunk.choices and chunk.choices[0].delta.content:
                    pieces.append(chunk.choices[0].delta.content)
                if chunk.usage is not None:
                    usage = chunk.usage
        finally:
            await client.close()
        assert len(pieces) >= 2
        assert usage is not None and usage.completion_tokens == 8
        assert await metric(stack, "mmgate_requests_total", status="200") == 1


@each_proxy
async def test_a_20_mb_inline_body_is_routed(proxy: str) -> None:
    async with envoy_stack(ROUND_ROBIN, proxy=proxy) as stack:
        blob = base64.b64encode(png(3, (64, 64)) + b"\0" * (15 * 1024 * 1024)).decode()
        content = [
            {"type": "text", "text": "big"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64," + blob}},
        ]
        body = orjson.dumps(
            {"model": stack.model, "messages": [{"role": "user", "content": content}], "max_tokens": 2}
        )
        assert len(body) > 20 * 1024 * 1024
        status, headers, data = await post(stack, body)
        assert status == 200, data[:300]
        assert headers["x-mmgate-endpoint"]


@each_proxy
async def test_a_bad_body_gets_the_openai_shaped_400_and_reaches_no_pod(proxy: str) -> None:
    async with envoy_stack(ROUND_ROBIN, proxy=proxy) as stack:
        status, headers, data = await post(stack, b'{"model": "x", "messages": "not a list"}')
        assert status == 400
        error = orjson.loads(data)["error"]
        assert error["type"] == "invalid_request_error" and error["param"] == "messages"
        assert headers["content-type"].startswith("application/json")
        for url in stack.fleet.urls:
            assert await pod_counter(stack, url, "vllm:request_success_total") == 0


async def test_no_ready_endpoint_gives_503() -> None:
    async with envoy_stack(ROUND_ROBIN, pods=1) as stack:
        model = stack.model
        await stack.fleet.stop()  # the only pod goes away; scrapes fail until it counts as unhealthy
        registry = stack.running.gateway.data.registry
        for _ in range(200):
            if not any(r.health.healthy for r in registry.records()):
                break
            await asyncio.sleep(0.05)
        status, headers, data = await post(
            stack, orjson.dumps({"model": model, "messages": [{"role": "user", "content": "x"}]})
        )
        assert status == 503, data
        assert orjson.loads(data)["error"]["code"] == "no_endpoint"
        assert headers["retry-after"] == "1"


async def test_shedding_gives_429() -> None:
    async with envoy_stack(ROUND_ROBIN, pods=1, time_scale=20.0) as stack:
        stack.running.gateway.controller.settings.max_inflight = 1  # one at a time, no queue
        slow = asyncio.create_task(post(stack, text_body(stack, "slow", max_tokens=50)))
        await asyncio.sleep(0.3)
        status, headers, data = await post(stack, text_body(stack, "shed me"))
        assert status == 429
        assert orjson.loads(data)["error"]["code"] == "overloaded" and "retry-after" in {
            k.lower() for k in headers
        }
        assert (await slow)[0] == 200


async def test_a_dead_endpoint_is_retried_on_the_next_fallback_and_the_server_is_charged() -> None:
    # Scrapes are slow here (2 s, 3 failures to mark a pod down), so mmgate still believes in a pod
    # that has just died: exactly the
    # window in which Envoy must walk the fallback list.
    async with envoy_stack(ROUND_ROBIN, pods=3, mmgate={"scrapeIntervalMs": 2_000}, max_endpoints=3) as stack:
        dead_pod = stack.fleet.pods[0]
        dead = dead_pod.url.split("://", 1)[1]
        await dead_pod.stop()
        replies = [await post(stack, text_body(stack, f"q{i}")) for i in range(6)]
        assert [s for s, _, _ in replies] == [200] * 6
        served = Counter(h["x-mmgate-endpoint"] for _, h, _ in replies)
        assert dead not in served and sum(served.values()) == 6
        # Each request was charged to the pod Envoy reached, not to the dead first choice.
        for endpoint, count in served.items():
            assert await metric(stack, "mmgate_requests_total", endpoint=endpoint, status="200") == count
        assert await metric(stack, "mmgate_requests_total", endpoint=dead) == 0
        assert await metric(stack, "mmgate_upstream_errors_total", endpoint=dead) >= 1


async def test_health_services_answer() -> None:
    async with (
        envoy_stack(ROUND_ROBIN) as stack,
        grpc.aio.insecure_channel(f"127.0.0.1:{stack.running.port}") as channel,
    ):
        stub = health_pb2_grpc.HealthStub(channel)

        async def status_of(service: str) -> int:
            answer = await stub.Check(health_pb2.HealthCheckRequest(service=service))
            return int(answer.status)

        async def until(service: str, wanted: int) -> None:
            for _ in range(100):  # readiness is re-evaluated every second
                if await status_of(service) == wanted:
                    return
                await asyncio.sleep(0.05)
            raise AssertionError(f"{service} never became {wanted}")

        serving = health_pb2.HealthCheckResponse.SERVING
        for service in ("liveness", "readiness", "envoy.service.ext_proc.v3.ExternalProcessor"):
            await until(service, serving)
        await stack.fleet.stop()  # no fleet: not ready, but alive
        await until("readiness", health_pb2.HealthCheckResponse.NOT_SERVING)
        assert await status_of("liveness") == serving


async def test_with_tracing_on_the_pod_gets_the_traceparent_of_the_extproc_attempt_span() -> None:
    client = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    with OtlpReceiver() as otlp:
        async with envoy_stack(
            ROUND_ROBIN, pods=1, mmgate={"tracing": TracingSpec(endpoint=otlp.url)}
        ) as stack:
            async with stack.session.post(
                stack.url + "/v1/chat/completions", data=text_body(stack), headers={"traceparent": client}
            ) as resp:
                body = await resp.read()
                assert resp.status == 200, body
            pod = stack.fleet.pods[0]
    [root] = otlp.named("POST /v1/chat/completions")
    assert (root.trace_id, root.parent_id) == ("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7")
    assert sorted(s.name for s in otlp.children(root)) == ["decide", "parse", "upstream"]
    [upstream] = otlp.named("upstream")
    assert sorted(s.name for s in otlp.children(upstream)) == ["first_byte", "relay"]
    assert upstream.attributes["mmgate.bytes_sent"] == len(body)
    assert pod.trace_parents == (f"00-4bf92f3577b34da6a3ce929d0e0e4736-{upstream.span_id}-01",)
