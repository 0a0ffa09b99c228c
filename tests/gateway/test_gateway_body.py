"""The gateway's upstream body path (forward without joining) delivers exact bytes."""

from __future__ import annotations

import hashlib
import os
from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp import web

from mmgate.gateway.body import ForwardedBody
from mmgate.gateway.memory import keep_large_buffers

LIMIT = 4 * 1024 * 1024


async def _digest(request: web.Request) -> web.Response:
    body = await request.read()
    return web.json_response(
        {"size": len(body), "sha": hashlib.sha256(body).hexdigest(), "type": type(body).__name__}
    )


@pytest.fixture
async def digest_url() -> AsyncIterator[str]:
    app = web.Application(client_max_size=LIMIT)
    app.router.add_post("/", _digest)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    yield f"http://127.0.0.1:{port}/"
    await runner.cleanup()


@pytest.mark.parametrize("size", [0, 10, 64 * 1024 - 1, 64 * 1024, 3 * 1024 * 1024 + 7])
async def test_forwarded_bodies_arrive_byte_for_byte(digest_url: str, size: int) -> None:
    data = os.urandom(size)
    async with (
        aiohttp.ClientSession() as session,
        session.post(digest_url, data=ForwardedBody(data)) as answer,
    ):
        got = await answer.json()
    assert got == {"size": size, "sha": hashlib.sha256(data).hexdigest(), "type": "bytes"}


def test_malloc_tuning_applies_on_linux_glibc() -> None:
    import platform

    expected = platform.system() == "Linux" and platform.libc_ver()[0] == "glibc"
    assert keep_large_buffers() is expected
