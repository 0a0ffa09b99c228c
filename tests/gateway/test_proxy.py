"""The proxy against scriptable upstreams on loopback: bytes, headers, retries, streaming."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator

import aiohttp
import orjson
import pytest
from aiohttp import web
from multidict import CIMultiDict

from mmgate.control.parser import make_parser
from mmgate.gateway.app import Running
from mmgate.gateway.server import Gateway
from mmgate.request import parse_request
from mmgate.request.limits import Limits
from mmgate.request.media_uuids import with_media_uuids
from mmgate.request.payload import identity_of
from mmgate.request.pieces import joined
from mmgate.request.view import Api
from support.bodies import photo_chat
from support.upstreams import OrderRouter, Upstream, free_port, sse_behaviour, start_gateway, status_behaviour

BODY = b'{"model": "m",   "messages": [{"role": "user", "content": "hi \\u00e9"}]}'


@pytest.fixture
async def upstreams() -> AsyncIterator[list[Upstream]]:
    ups = [Upstream(), Upstream()]
    for u in ups:
        await u.start()
    yield ups
    for u in ups:
        await u.stop()


class Env:
    def __init__(
        self, gateway: Gateway, url: str, router: OrderRouter, session: aiohttp.ClientSession
    ) -> None:
        self.gateway = gateway
        self.url = url
        self.router = router
        self.session = session

    async def post(
        self, body: bytes = BODY, path: str = "/v1/chat/completions", **headers: str
    ) -> tuple[int, CIMultiDict[str], bytes]:
        async with self.session.post(self.url + path, data=body, headers=headers) as resp:
            return resp.status, CIMultiDict(resp.headers), await resp.read()


async def make_env(addresses: list[str], order: list[str], **kwargs: object) -> tuple[Env, Running]:
    router = OrderRouter(order=order)
    gateway, running, url = await start_gateway(addresses, router, **kwargs)  # type: ignore[arg-type]
    return Env(gateway, url, router, aiohttp.ClientSession()), running


@pytest.fixture
async def env(upstreams: list[Upstream]) -> AsyncIterator[Env]:
    e, running = await make_env([u.address for u in upstreams], [upstreams[0].address])
    yield e
    await e.session.close()
    await running.stop()


async def test_original_bytes_are_forwarded_and_the_decision_is_reported(
    env: Env, upstreams: list[Upstream]
) -> None:
    status, headers, _ = await env.post(
        BODY,
        **{
            "Authorization": "Bearer sk-test",
            "x-gateway-destination-endpoint": "10.9.9.9:1",
            "X-Encoder-Hosts-Ports": "10.9.9.9:2",
            "x-mmgate-endpoint": "forged",
            "x-request-id": "req-123",
            "Expect": "100-continue",
        },
    )
    assert status == 200
    assert upstreams[0].bodies == [BODY]  # byte for byte, whitespace and escapes included
    sent = {k.lower(): v for k, v in upstreams[0].headers[0].items()}
    assert sent["authorization"] == "Bearer sk-test"
    assert sent["x-request-id"] == "req-123"
    assert "x-gateway-destination-endpoint" not in sent
    assert "x-encoder-hosts-ports" not in sent
    assert "x-mmgate-endpoint" not in sent
    assert "expect" not in sent
    assert sent["x-prefiller-host-port"] == "10.0.0.1:1"  # set by the router, not the client
    assert headers["x-mmgate-endpoint"] == upstreams[0].address
    assert headers["x-mmgate-request-tokens"] == "42"
    assert headers["x-request-id"] == "req-123"
    assert "x-mmgate-scores" not in headers  # debug scores only when asked
    assert env.router.calls == [("started", upstreams[0].address), ("first_token", upstreams[0].address),
                                ("finished", upstreams[0].address)]  # fmt: skip
    await asyncio.sleep(0)
    assert env.router.hooks == 1


async def test_debug_scores_on_request(env: Env) -> None:
    _, headers, _ = await env.post(BODY, **{"x-mmgate-debug": "1"})
    assert "test-scorer=1.000" in headers["x-mmgate-scores"]


@pytest.mark.parametrize("failure", [500, 503, 429])
async def test_a_failing_endpoint_is_retried_on_the_next_one(
    env: Env, upstreams: list[Upstream], failure: int
) -> None:
    upstreams[0].behaviour = status_behaviour(failure)
    status, headers, _ = await env.post()
    assert status == 200
    assert headers["x-mmgate-endpoint"] == upstreams[1].address
    assert len(upstreams[0].bodies) == 1 and upstreams[1].bodies == [BODY]
    assert [c[0] for c in env.router.calls] == ["started", "failed", "started", "first_token", "finished"]
    metrics = (await env.session.get(env.url + "/metrics")).content
    text = (await metrics.read()).decode()
    assert f'mmgate_retries_total{{reason="{failure}"}} 1.0' in text


async def test_when_every_endpoint_fails_the_last_answer_is_passed_through(
    env: Env, upstreams: list[Upstream]
) -> None:
    for u in upstreams:
        u.behaviour = status_behaviour(503)
    status, headers, body = await env.post()
    assert status == 503
    assert b"upstream says 503" in body
    assert headers["x-mmgate-endpoint"] == upstreams[1].address


async def test_connection_refused_is_retried_and_all_refused_is_a_502(upstreams: list[Upstream]) -> None:
    dead = f"127.0.0.1:{free_port()}"
    e, running = await make_env([dead, upstreams[0].address], [dead])
    try:
        status, headers, _ = await e.post()
        assert status == 200 and headers["x-mmgate-endpoint"] == upstreams[0].address
    finally:
        await e.session.close()
        await running.stop()
    e, running = await make_env([dead], [dead])
    try:
        status, _, body = await e.post()
        assert status == 502
        assert b'"type":"upstream_error"' in body and b"cannot connect to upstream" in body
    finally:
        await e.session.close()
        await running.stop()


async def test_sse_chunks_arrive_one_by_one(env: Env, upstreams: list[Upstream]) -> None:
    chunks = [f'data: {{"i": {i}}}\n\n'.encode() for i in range(5)] + [b"data: [DONE]\n\n"]
    upstreams[0].behaviour = sse_behaviour(chunks, delay=0.05)
    loop = asyncio.get_running_loop()
    arrivals: list[tuple[float, bytes]] = []
    async with env.session.post(env.url + "/v1/chat/completions", data=BODY) as resp:
        assert resp.headers["Content-Type"].startswith("text/event-stream")
        async for chunk in resp.content.iter_any():
            arrivals.append((loop.time(), chunk))
    assert b"".join(c for _, c in arrivals) == b"".join(chunks)
    assert len(arrivals) >= 5  # not buffered into one piece
    assert arrivals[-1][0] - arrivals[0][0] >= 0.15  # spread over the upstream's own pacing


async def test_a_stream_that_breaks_midway_is_cut_not_completed(env: Env, upstreams: list[Upstream]) -> None:
    async def broken(request: web.Request, _body: bytes) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(b'data: {"i": 0}\n\n')
        await asyncio.sleep(0.05)
        assert request.transport is not None
        request.transport.abort()
        return resp

    upstreams[0].behaviour = broken
    with pytest.raises(aiohttp.ClientPayloadError):
        async with env.session.post(env.url + "/v1/chat/completions", data=BODY) as resp:
            assert resp.status == 200
            await resp.read()
    assert upstreams[1].bodies == []  # streaming had begun: no retry
    await asyncio.sleep(0.05)
    assert ("failed", upstreams[0].address) in env.router.calls


async def test_a_pod_dying_after_headers_but_before_the_first_byte_is_retried(
    env: Env, upstreams: list[Upstream]
) -> None:
    async def dies(request: web.Request, _body: bytes) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        assert request.transport is not None
        request.transport.abort()
        return resp

    upstreams[0].behaviour = dies
    status, headers, _ = await env.post()
    assert status == 200 and headers["x-mmgate-endpoint"] == upstreams[1].address


async def test_client_errors_are_openai_shaped_4xx(env: Env, upstreams: list[Upstream]) -> None:
    status, _, body = await env.post(b"{not json")
    assert status == 400 and b'"param":"body"' in body
    status, _, body = await env.post(b'{"model": "nope", "messages": []}')
    assert status in (200, 404)  # models not fetched yet: routed; once known, refused
    for _ in range(100):
        if all(r.models for r in env.gateway.data.registry.records()):
            break
        await asyncio.sleep(0.02)
    status, _, body = await env.post(b'{"model": "nope", "messages": []}')
    assert status == 404 and b'"code":"model_not_found"' in body and b'"param":"model"' in body
    status, _, body = await env.post(b'{"model": "m", "pad": "' + b"x" * (2 << 20) + b'"}')
    assert status == 413 and b'"param":"body"' in body
    async with env.session.get(env.url + "/v1/nothing") as resp:
        assert resp.status == 404 and "error" in await resp.json()
    async with env.session.get(env.url + "/v1/chat/completions") as resp:
        assert resp.status == 405 and "error" in await resp.json()
        assert resp.headers["Allow"] == "POST"
    async with env.session.post(env.url + "/health") as resp:
        assert resp.status == 405 and resp.headers["Allow"] == "GET, HEAD"
    assert sum(len(u.bodies) for u in upstreams) <= 1


async def test_health_ready_models_and_metrics(env: Env, upstreams: list[Upstream]) -> None:
    async with env.session.get(env.url + "/health") as resp:
        assert resp.status == 200
    for _ in range(100):
        async with env.session.get(env.url + "/ready") as resp:
            if resp.status == 200:
                break
        await asyncio.sleep(0.02)
    assert resp.status == 200
    for _ in range(100):
        async with env.session.get(env.url + "/v1/models") as resp:
            models = await resp.json()
        if models["data"]:
            break
        await asyncio.sleep(0.02)
    assert [m["id"] for m in models["data"]] == ["m"]
    assert models["data"][0]["max_model_len"] == 4096  # the servers' own model objects
    await env.post()
    async with env.session.get(env.url + "/metrics") as resp:
        text = await resp.text()
    a = upstreams[0].address
    assert f'mmgate_requests_total{{endpoint="{a}",model="m",status="200"}} 1.0' in text
    assert f'mmgate_endpoint_healthy{{endpoint="{a}"}} 1.0' in text
    assert f'mmgate_encoder_cache_hits_total{{modality="image",pod="{a}"}} 1.0' in text
    assert 'mmgate_priced_tokens_total{modality="image"} 2.0' in text
    assert "mmgate_decision_latency_seconds_count 1.0" in text
    assert 'mmgate_prefix_match_ratio_bucket{le="0.5"} 1.0' in text


async def _read_head(reader: asyncio.StreamReader) -> tuple[str, dict[str, str]]:
    raw = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
    status, *lines = raw.decode("latin-1").split("\r\n")[:-2]
    return status, {k.lower(): v.strip() for k, v in (line.split(":", 1) for line in lines)}


async def test_head_on_get_routes_is_get_without_a_body_and_keeps_the_connection(env: Env) -> None:
    for _ in range(100):
        async with env.session.get(env.url + "/v1/models") as resp:
            if (await resp.json())["data"]:
                break
        await asyncio.sleep(0.02)
    host, port = env.url.removeprefix("http://").rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        # Pipelined on one connection: HEAD, GET, HEAD; a body after a HEAD would be read as the
        # next status line and fail the parse below.
        writer.write(
            b"HEAD /v1/models HTTP/1.1\r\nHost: x\r\n\r\n"
            b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n"
            b"HEAD /health HTTP/1.1\r\nHost: x\r\n\r\n"
        )
        head_status, head = await _read_head(reader)
        get_status, get = await _read_head(reader)
        body = await asyncio.wait_for(reader.readexactly(int(get["content-length"])), 5)
        health_status, health = await _read_head(reader)
        assert head_status == get_status == health_status == "HTTP/1.1 200 OK"
        assert int(head["content-length"]) == len(body) > 0 and b'"data"' in body
        assert head["content-type"] == get["content-type"]
        assert "connection" not in head and int(health["content-length"]) > 0
        writer.write(b"HEAD /ready HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        ready_status, _ = await _read_head(reader)
        assert ready_status == "HTTP/1.1 200 OK"
        assert await asyncio.wait_for(reader.read(), 5) == b""  # no body, then the close
    finally:
        writer.close()


async def test_removing_an_endpoint_makes_the_router_forget_it(env: Env, upstreams: list[Upstream]) -> None:
    env.gateway.data.registry.remove(upstreams[1].address)
    assert env.router.forgotten == [upstreams[1].address]


async def test_anthropic_messages_and_completions_pass_through_to_the_same_path(
    env: Env, upstreams: list[Upstream]
) -> None:
    seen: list[str] = []

    async def record_path(request: web.Request, body: bytes) -> web.StreamResponse:
        seen.append(request.path_qs)
        return web.json_response({"type": "message"})

    upstreams[0].behaviour = record_path
    body = b'{"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}'
    status, headers, _ = await env.post(
        body, path="/v1/messages?beta=true", **{"anthropic-version": "2023-06-01"}
    )
    assert status == 200 and headers["x-mmgate-endpoint"] == upstreams[0].address
    status, _, _ = await env.post(b'{"model": "m", "prompt": "x"}', path="/v1/completions")
    assert status == 200
    assert seen == ["/v1/messages?beta=true", "/v1/completions"]
    assert upstreams[0].bodies[0] == body
    assert upstreams[0].headers[0]["anthropic-version"] == "2023-06-01"


async def test_a_client_that_leaves_before_the_first_byte_cancels_the_upstream_request(
    env: Env, upstreams: list[Upstream]
) -> None:
    cancelled = asyncio.Event()

    async def slow(request: web.Request, _body: bytes) -> web.StreamResponse:
        try:
            await asyncio.sleep(5)  # a long prefill
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return web.json_response({})

    upstreams[0].behaviour = slow
    with pytest.raises(asyncio.TimeoutError):
        async with env.session.post(
            env.url + "/v1/chat/completions", data=BODY, timeout=aiohttp.ClientTimeout(total=0.3)
        ) as resp:
            await resp.read()
    await asyncio.wait_for(cancelled.wait(), timeout=3)
    for _ in range(100):
        if env.router.calls and env.router.calls[-1][0] == "failed":
            break
        await asyncio.sleep(0.01)
    assert env.router.calls == [("started", upstreams[0].address), ("failed", upstreams[0].address)]
    text = await (await env.session.get(env.url + "/metrics")).text()
    assert 'status="client_closed"' in text
    assert "mmgate_inflight_requests 0.0" in text


async def test_beyond_the_inflight_limit_requests_get_429_with_retry_after(
    env: Env, upstreams: list[Upstream]
) -> None:
    env.gateway.settings.control.max_inflight = 2
    release = asyncio.Event()

    async def held(_request: web.Request, _body: bytes) -> web.StreamResponse:
        await release.wait()
        return web.json_response({})

    upstreams[0].behaviour = held
    upstreams[1].behaviour = held
    first = [asyncio.create_task(env.post()) for _ in range(2)]
    while env.gateway.inflight < 2:
        await asyncio.sleep(0.01)
    status, headers, body = await env.post()
    assert status == 429 and headers["Retry-After"] == "1" and b'"code":"overloaded"' in body
    release.set()
    assert [r[0] for r in await asyncio.gather(*first)] == [200, 200]
    assert env.gateway.inflight == 0


@pytest.mark.parametrize("pad", [0, 64 * 1024, 3 * 1024 * 1024 + 7])
async def test_bodies_of_every_size_reach_the_endpoint_byte_for_byte(
    upstreams: list[Upstream], pad: int
) -> None:
    e, running = await make_env([upstreams[0].address], [], max_body_bytes=8 << 20)
    body = b'{"model": "m", "pad": "' + os.urandom(pad // 2).hex().encode() + b'"}'
    try:
        status, _, answer = await e.post(body)
        assert status == 200 and orjson.loads(answer)["echo_len"] == len(body)
        assert upstreams[0].bodies == [body]
    finally:
        await e.session.close()
        await running.stop()


@pytest.mark.parametrize("images", [1, 3])
async def test_media_uuids_reach_every_attempt_as_the_joined_splice_byte_for_byte(
    upstreams: list[Upstream], images: int
) -> None:
    """The spliced body goes out as pieces (one vectored write): the endpoint reads the bytes a
    joined body would have been, with its Content-Length, and a retry resends the same bytes."""
    sent = photo_chat(images, model="photo-model")
    limits = Limits(own_media_uuids=True)
    reference = joined(with_media_uuids(parse_request(sent, {}, api=Api.CHAT, limits=limits)))
    for u in upstreams:  # serve the body's model: once /v1/models is read, another is a 404
        u.model = "photo-model"
    upstreams[0].behaviour = status_behaviour(503)
    e, running = await make_env(
        [u.address for u in upstreams],
        [upstreams[0].address],
        parse=make_parser(limits),
        max_body_bytes=8 << 20,
    )
    try:
        status, headers, _ = await e.post(sent)
        assert status == 200 and headers["x-mmgate-endpoint"] == upstreams[1].address
    finally:
        await e.session.close()
        await running.stop()
    assert upstreams[0].bodies == upstreams[1].bodies == [reference]
    assert upstreams[1].headers[0]["Content-Length"] == str(len(reference))
    # and the reference is the client's bytes with one uuid member per image, nothing else
    doc = orjson.loads(sent)
    parts = [p for m in doc["messages"] if isinstance(m["content"], list) for p in m["content"]]
    images = [p for p in parts if p.get("type") == "image_url"]
    for part in images:
        part["uuid"] = identity_of(part["image_url"]["url"].split(",", 1)[1])
    assert images and orjson.loads(reference) == doc
    stripped = reference
    for part in images:
        stripped = stripped.replace(b',"uuid":"' + part["uuid"].encode() + b'"', b"")
    assert stripped == sent
