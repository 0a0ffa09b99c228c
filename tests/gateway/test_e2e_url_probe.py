"""URL media sizing (``mmgate.urlProbe``) over real HTTP: an image on a loopback image server is
priced by its real size; a host off the allow-list, a redirect and a slow server leave the default
price and the request still served; every outcome is counted in ``mmgate_url_probe_total``."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import orjson
from aiohttp import web

from support.stack import ENCODER_AFFINITY, Stack, chat_body, png, stack
from support.upstreams import serve

PROBED = (
    ENCODER_AFFINITY
    + """
mmgate:
  urlProbe:
    allowHosts: ["127.0.0.1"]
    allowPrivate: true   # the image server is on loopback
    timeoutS: 0.5
    maxBytes: 4096
"""
)


def url_body(model: str, url: str) -> bytes:
    content: list[dict[str, Any]] = [
        {"type": "text", "text": "what is this?"},
        {"type": "image_url", "image_url": {"url": url}},
    ]
    return orjson.dumps({"model": model, "messages": [{"role": "user", "content": content}], "max_tokens": 4})


async def probe_counts(s: Stack) -> dict[str, float]:
    async with s.session.get(s.url + "/metrics") as resp:
        text = await resp.text()
    found = re.findall(r'^mmgate_url_probe_total\{outcome="(\w+)"\} (\S+)$', text, re.M)
    return {outcome: float(v) for outcome, v in found}


async def test_url_images_are_priced_by_their_real_size_and_failures_fall_back() -> None:
    big = png(3, (1280, 720))
    served: list[str] = []
    release = asyncio.Event()

    async def image(request: web.Request) -> web.Response:
        served.append(request.headers.get("Range", ""))
        return web.Response(body=big, content_type="image/png")

    async def slow(_request: web.Request) -> web.Response:
        await release.wait()
        return web.Response(body=big, content_type="image/png")

    async def moved(_request: web.Request) -> web.Response:
        raise web.HTTPFound("/big.png")

    app = web.Application()
    app.router.add_get("/big.png", image)
    app.router.add_get("/slow.png", slow)
    app.router.add_get("/moved.png", moved)
    runner, port = await serve(app)
    base = f"http://127.0.0.1:{port}"
    try:
        async with stack(PROBED, pods=2) as s:
            inline = await s.post(chat_body(s.model, "what is this?", [big]))
            by_url = await s.post(url_body(s.model, base + "/big.png"))
            assert inline.status == by_url.status == 200
            assert by_url.tokens == inline.tokens  # the URL image priced as the same image inline
            assert served == ["bytes=0-4095"]  # a header-only range read
            again = await s.post(url_body(s.model, base + "/big.png"))
            assert again.tokens == inline.tokens and len(served) == 1  # from the cache

            refused = await s.post(url_body(s.model, f"http://localhost:{port}/big.png"))  # not allowed
            redirected = await s.post(url_body(s.model, base + "/moved.png"))
            cut = await s.post(url_body(s.model, base + "/slow.png"))
            assert refused.status == redirected.status == cut.status == 200  # served at the default
            assert refused.tokens == redirected.tokens == cut.tokens != inline.tokens
            assert len(served) == 1  # the redirect was not followed to /big.png
            expected = {"miss": 1, "hit": 1, "refused": 1, "failed": 1, "timeout": 1}
            for _ in range(100):  # the cut fetch reports its timeout as it ends, beside the request
                if await probe_counts(s) == expected:
                    break
                await asyncio.sleep(0.05)
            assert await probe_counts(s) == expected
    finally:
        release.set()
        await runner.cleanup()


async def test_the_probe_is_off_without_the_section() -> None:
    hits: list[str] = []

    async def image(request: web.Request) -> web.Response:
        hits.append(request.path)
        return web.Response(body=png(1, (1280, 720)), content_type="image/png")

    app = web.Application()
    app.router.add_get("/big.png", image)
    runner, port = await serve(app)
    try:
        async with stack(ENCODER_AFFINITY, pods=1) as s:
            reply = await s.post(url_body(s.model, f"http://127.0.0.1:{port}/big.png"))
            assert reply.status == 200 and reply.tokens > 0
            assert hits == [] and await probe_counts(s) == {}
    finally:
        await runner.cleanup()
