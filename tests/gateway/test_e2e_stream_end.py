"""Streams end cleanly whatever the client does after the last event: a client that hangs up as
soon as it has read ``data: [DONE]`` (guidellm does) got a delivered stream, which is a ``200`` in
the access log and the metrics, and leaves the upstream connection reusable."""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import AsyncIterator, Sequence

import aiohttp
import pytest
from aiohttp import web

from mmgate.gateway.app import Running
from support.stack import ROUND_ROBIN, chat_body, png, stack
from support.upstreams import OrderRouter, Upstream, sse_behaviour, start_gateway

BODY = b'{"model": "m", "stream": true, "messages": [{"role": "user", "content": "hi"}]}'
EVENTS = [b'data: {"i": 0}\n\n', b'data: {"i": 1}\n\n', b"data: [DONE]\n\n"]


class Env:
    def __init__(self, upstream: Upstream, running: Running, router: OrderRouter) -> None:
        self.upstream = upstream
        self.running = running
        self.router = router
        self.peers: list[object] = []  # the gateway's address as each upstream request saw it

    async def metrics(self) -> str:
        async with aiohttp.ClientSession() as session, session.get(self.running.url + "/metrics") as resp:
            return await resp.text()


@pytest.fixture
async def env() -> AsyncIterator[Env]:
    upstream = Upstream()
    await upstream.start()
    router = OrderRouter()
    _, running, _ = await start_gateway([upstream.address], router)
    yield Env(upstream, running, router)
    await running.stop()
    await upstream.stop()


def recording(env: Env, chunks: Sequence[bytes], delay: float) -> None:
    inner = sse_behaviour(chunks, delay)

    async def behaviour(request: web.Request, body: bytes) -> web.StreamResponse:
        assert request.transport is not None
        env.peers.append(request.transport.get_extra_info("peername"))
        return await inner(request, body)

    env.upstream.behaviour = behaviour


async def hang_up_after_done(url: str, body: bytes = BODY) -> bytes:
    """POST a streaming request over a raw socket, read until ``data: [DONE]``, close at once."""
    host, port = url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n%b" % (len(body), body)
    )
    seen = b""
    while b"data: [DONE]\n\n" not in seen:
        data = await asyncio.wait_for(reader.read(65536), 10)
        assert data, f"the stream ended before [DONE]: {seen!r}"
        seen += data
    writer.close()  # no waiting for the chunked terminator
    return seen


async def settled(caplog: pytest.LogCaptureFixture, count: int) -> list[str]:
    """The access log's statuses once ``count`` requests are logged (the gateway logs a request
    when its handler ends, which may be after the client left)."""
    for _ in range(500):
        statuses = [r.fields["status"] for r in caplog.records if r.name == "mmgate.access"]  # type: ignore[attr-defined]
        if len(statuses) >= count:
            return statuses
        await asyncio.sleep(0.01)
    raise AssertionError(f"fewer than {count} requests logged: {caplog.text}")


@pytest.mark.parametrize(
    "delay",
    [0.0, 0.05],
    ids=["end-with-the-last-event", "end-50ms-after-the-last-event"],
)
async def test_a_client_closing_right_after_done_is_a_200_in_the_log_and_the_metrics(
    env: Env, delay: float, caplog: pytest.LogCaptureFixture
) -> None:
    # With a delay the upstream sends [DONE], waits, then its chunked terminator: the window in
    # which a client that hangs up at [DONE] used to be logged client_closed.
    recording(env, EVENTS, delay)
    caplog.set_level(logging.INFO, logger="mmgate")
    rounds = 3
    for _ in range(rounds):
        seen = await hang_up_after_done(env.running.url)
        assert seen.startswith(b"HTTP/1.1 200 ")
    statuses = await settled(caplog, rounds)
    assert statuses == ["200"] * rounds
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text
    text = await env.metrics()
    assert re.search(r'^mmgate_requests_total\{[^}]*status="200"[^}]*\} 3\.0$', text, re.M), text
    assert "client_closed" not in text
    assert env.router.calls.count(("finished", env.upstream.address)) == rounds
    # The upstream answered in full each time: its connection was reused, not closed.
    assert len(set(env.peers)) == 1, env.peers


@pytest.mark.slow
async def test_through_simulated_pods_streams_closed_at_done_are_200s(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="mmgate")
    async with stack(ROUND_ROBIN, pods=2) as s:
        s.running.gateway.settings.access_log = True
        rounds = 12
        for i in range(rounds):
            images = [png(i)] if i % 2 else []
            body = chat_body(s.model, "hello", images, max_tokens=8, stream=True)
            assert (await hang_up_after_done(s.url, body)).startswith(b"HTTP/1.1 200 ")
        statuses = await settled(caplog, rounds)
        text = await (await s.session.get(s.url + "/metrics")).text()
    assert statuses == ["200"] * rounds
    assert "client_closed" not in text
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text
