"""The opt-in URL probe refuses what it must (off by default, allow-list, private addresses) and
bounds what it fetches (bytes, time, no redirects), against real servers on loopback."""

from __future__ import annotations

import asyncio
import time

from aiohttp import web

from mmgate.request.urlprobe import UrlProber, UrlProbeSettings, address_allowed, host_allowed
from support.upstreams import serve


def test_allow_list_patterns() -> None:
    allow = ("images.example.com", "*.cdn.example.net")
    assert host_allowed("images.example.com", allow)
    assert host_allowed("IMAGES.example.com.", allow)
    assert host_allowed("a.b.cdn.example.net", allow)
    assert not host_allowed("cdn.example.net", allow)  # the wildcard needs a subdomain
    assert not host_allowed("images.example.com.evil.org", allow)
    assert not host_allowed("evilcdn.example.net", allow)


def test_private_loopback_and_link_local_addresses_are_refused() -> None:
    refused = ["127.0.0.1", "10.1.2.3", "172.16.0.1", "192.168.1.1", "169.254.169.254", "0.0.0.0"]
    refused += ["::1", "fe80::1%eth0", "fc00::1", "::ffff:127.0.0.1", "224.0.0.1", "100.64.0.1"]
    for address in refused:
        assert not address_allowed(address, allow_private=False), address
    assert address_allowed("8.8.8.8", allow_private=False)
    assert address_allowed("2001:4860:4860::8888", allow_private=False)
    assert address_allowed("10.1.2.3", allow_private=True)
    assert not address_allowed("0.0.0.0", allow_private=True)


async def test_off_by_default_and_refusals_never_connect() -> None:
    hits: list[str] = []

    async def handler(request: web.Request) -> web.Response:
        hits.append(request.path)
        return web.Response(body=b"x")

    app = web.Application()
    app.router.add_get("/{tail:.*}", handler)
    runner, port = await serve(app)
    try:
        url = f"http://127.0.0.1:{port}/a.png"
        off = await UrlProber(UrlProbeSettings()).fetch_head(url)
        assert off.head is None and "off" in off.reason
        no_list = await UrlProber(UrlProbeSettings(enabled=True)).fetch_head(url)
        assert no_list.head is None and "allow-list" in no_list.reason
        loopback = await UrlProber(
            UrlProbeSettings(enabled=True, allow_hosts=("127.0.0.1", "localhost"))
        ).fetch_head(url)
        assert loopback.head is None and "non-public" in loopback.reason
        by_name = await UrlProber(UrlProbeSettings(enabled=True, allow_hosts=("localhost",))).fetch_head(
            f"http://localhost:{port}/a.png"
        )
        assert by_name.head is None and "non-public" in by_name.reason  # an allowed name is not enough
        ftp = await UrlProber(UrlProbeSettings(enabled=True, allow_hosts=("127.0.0.1",))).fetch_head(
            "ftp://127.0.0.1/x"
        )
        assert ftp.head is None and "scheme" in ftp.reason
        assert hits == []
    finally:
        await runner.cleanup()


async def test_bytes_time_redirects_and_cache_are_bounded() -> None:
    ranges: list[str] = []

    async def big(request: web.Request) -> web.StreamResponse:
        ranges.append(request.headers.get("Range", ""))
        resp = web.StreamResponse()  # ignores Range and sends 4 MB
        await resp.prepare(request)
        for _ in range(64):
            await resp.write(b"\x89PNG" * 16384)
        return resp

    never = asyncio.Event()

    async def slow(_request: web.Request) -> web.Response:
        await never.wait()  # only the prober's timeout ends this fetch
        return web.Response(body=b"late")

    async def moved(_request: web.Request) -> web.Response:
        raise web.HTTPFound("http://169.254.169.254/latest/meta-data/")

    app = web.Application()
    app.router.add_get("/big.png", big)
    app.router.add_get("/slow.png", slow)
    app.router.add_get("/moved.png", moved)
    runner, port = await serve(app)
    prober = UrlProber(
        UrlProbeSettings(
            enabled=True, allow_hosts=("127.0.0.1",), allow_private=True, max_bytes=1000, timeout_s=0.5
        )
    )
    base = f"http://127.0.0.1:{port}"
    try:
        got = await prober.fetch_head(base + "/big.png")
        assert got.head is not None and len(got.head) == 1000 and got.head.startswith(b"\x89PNG")
        assert ranges == ["bytes=0-999"]
        again = await prober.fetch_head(base + "/big.png")
        assert again.head == got.head and again.outcome == "hit" and len(ranges) == 1  # cached: fetched once
        started = time.monotonic()
        late = await prober.fetch_head(base + "/slow.png")
        assert late.head is None and "0.5 s" in late.reason
        assert time.monotonic() - started >= 0.45
        never.set()
        redirected = await prober.fetch_head(base + "/moved.png")
        assert redirected.head is None and redirected.reason == "HTTP 302"  # not followed
    finally:
        await runner.cleanup()
