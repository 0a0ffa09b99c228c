"""https endpoints: the pool and the scraper speak TLS to a real server on loopback, with a
throwaway CA made by trustme. Verification is on by default; a private CA comes from
``mmgate.upstreamTLS.caFile``; plain http stays on its own TLS-free connections."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator, Callable, Coroutine
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import trustme
import uvloop
from aiohttp import web

from mmgate.config import MmgateSection
from mmgate.config.schema import UpstreamTLSSpec
from mmgate.config.strict import ConfigError
from mmgate.gateway.app import settings_of, start
from mmgate.gateway.server import Gateway
from mmgate.http.client import UpstreamPool, UpstreamTLSError
from mmgate.tls import CA_OPTION, client_context
from support.upstreams import OrderRouter, tiny_parse

BODY = b'{"model": "m", "messages": [{"role": "user", "content": "hi"}]}'


class Server:
    """A model-server stand-in on loopback, over TLS when given a context; records which client
    connection (peer port) carried each request."""

    def __init__(self, context: ssl.SSLContext | None) -> None:
        self.context = context
        self.peers: list[int] = []
        self.runner: web.AppRunner | None = None
        self.port = 0

    async def _chat(self, request: web.Request) -> web.Response:
        self.peers.append(request.transport.get_extra_info("peername")[1])  # type: ignore[union-attr]
        return web.json_response({"len": len(await request.read())})

    async def _metrics(self, _request: web.Request) -> web.Response:
        return web.Response(text='vllm:num_requests_waiting{model_name="m"} 0\n')

    async def _models(self, _request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "m", "object": "model"}]})

    async def start(self) -> Server:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/v1/models", self._models)
        self.runner = web.AppRunner(app, access_log=None)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0, ssl_context=self.context)
        await site.start()
        self.port = self.runner.addresses[0][1]
        return self

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()


def server_context(ca: trustme.CA, *names: str) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert(*names).configure_cert(context)
    return context


def ca_file(ca: trustme.CA, tmp: Path) -> str:
    path = tmp / "ca.pem"
    ca.cert_pem.write_to_path(str(path))
    return str(path)


async def post(pool: UpstreamPool, port: int, *, tls: bool) -> int:
    response = await pool.request("127.0.0.1", port, "POST", "/v1/chat/completions", [], BODY, tls=tls)
    while await response.read():
        pass
    response.release()
    return response.status


# -- the pool (also run on uvloop below) ---------------------------------------------------------


async def https_and_http_are_pooled_apart(tmp: Path) -> None:
    ca = trustme.CA()
    secure = await Server(server_context(ca, "127.0.0.1")).start()
    plain = await Server(None).start()
    http_only = UpstreamPool(connect_timeout_s=2, read_timeout_s=5)
    context = client_context(ca_file(ca, tmp))
    pool = UpstreamPool(connect_timeout_s=2, read_timeout_s=5, ssl_context=context)
    try:
        assert [await post(http_only, plain.port, tls=False) for _ in range(3)] == [200] * 3
        assert http_only.ssl_context is None  # http never builds or touches an SSL context
        assert len(set(plain.peers)) == 1  # kept alive
        assert [await post(pool, secure.port, tls=True) for _ in range(3)] == [200] * 3
        assert len(secure.peers) == 3 and len(set(secure.peers)) == 1  # TLS connection reused
        assert [await post(pool, plain.port, tls=False) for _ in range(2)] == [200] * 2
        assert len(set(plain.peers)) == 2  # one connection per pool
        assert pool.origins == {("127.0.0.1", plain.port, False), ("127.0.0.1", secure.port, True)}
        assert pool.ssl_context is context
    finally:
        await http_only.close()
        await pool.close()
        await secure.stop()
        await plain.stop()


async def refusals_name_the_reason(tmp: Path) -> None:
    ca = trustme.CA()
    wrong_name = await Server(server_context(ca, "other.example")).start()
    untrusted = await Server(server_context(trustme.CA(), "127.0.0.1")).start()
    hint = f"trust a private CA with {CA_OPTION}"
    pool = UpstreamPool(
        connect_timeout_s=2,
        read_timeout_s=5,
        ssl_context=client_context(ca_file(ca, tmp)),
        untrusted_hint=hint,
    )
    default = UpstreamPool(connect_timeout_s=2, read_timeout_s=5, untrusted_hint=hint)  # system trust store
    insecure = UpstreamPool(
        connect_timeout_s=2, read_timeout_s=5, ssl_context=client_context(insecure_skip_verify=True)
    )
    try:
        with pytest.raises(UpstreamTLSError, match=r"not verified \(.*mismatch.*'127\.0\.0\.1'"):
            await post(pool, wrong_name.port, tls=True)
        for refusing in (pool, default):
            with pytest.raises(UpstreamTLSError, match=r"not verified .*mmgate\.upstreamTLS\.caFile"):
                await post(refusing, untrusted.port, tls=True)
        assert untrusted.peers == [] and wrong_name.peers == []  # nothing was sent
        assert await post(insecure, untrusted.port, tls=True) == 200  # the explicit opt-out
    finally:
        for p in (pool, default, insecure):
            await p.close()
        await wrong_name.stop()
        await untrusted.stop()


SCENARIOS = [https_and_http_are_pooled_apart, refusals_name_the_reason]


@pytest.mark.parametrize("scenario", SCENARIOS)
async def test_pool_on_asyncio(scenario: Callable[[Path], Coroutine[Any, Any, None]], tmp_path: Path) -> None:
    await scenario(tmp_path)


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_pool_on_uvloop(scenario: Callable[[Path], Coroutine[Any, Any, None]], tmp_path: Path) -> None:
    uvloop.run(scenario(tmp_path))


# -- the gateway, configured through the mmgate: section -----------------------------------------


@pytest.fixture
async def tls_server() -> AsyncIterator[tuple[Server, trustme.CA]]:
    ca = trustme.CA()
    server = await Server(server_context(ca, "127.0.0.1")).start()
    yield server, ca
    await server.stop()


async def run_gateway(section: MmgateSection, request_body: bytes = BODY) -> tuple[Gateway, int, bytes, str]:
    gateway = Gateway(settings_of(section), OrderRouter(order=[]), tiny_parse)
    running = await start(gateway, "127.0.0.1", 0)
    try:
        scraper, records = gateway.data.scraper, gateway.data.registry.records()
        for _ in range(150):  # the first scrape, over the same TLS settings, has an outcome
            if scraper.failures or all(r.models for r in records):
                break
            await asyncio.sleep(0.02)
        async with aiohttp.ClientSession() as session:
            async with session.get(running.url + "/v1/models") as resp:
                models = (await resp.json())["data"]
            async with session.post(running.url + "/v1/chat/completions", data=request_body) as resp:
                return gateway, resp.status, await resp.read(), ",".join(str(m) for m in models)
    finally:
        await running.stop()


async def test_an_https_endpoint_is_scraped_and_served_with_the_configured_ca(
    tls_server: tuple[Server, trustme.CA], tmp_path: Path
) -> None:
    server, ca = tls_server
    section = MmgateSection(
        endpoints=[f"https://127.0.0.1:{server.port}"],
        upstreamTLS=UpstreamTLSSpec(caFile=ca_file(ca, tmp_path)),
    )
    gateway, status, body, models = await run_gateway(section)
    assert "'id': 'm'" in models  # scraped over TLS
    assert status == 200 and body == b'{"len": %d}' % len(BODY)
    assert len(server.peers) == 1
    assert gateway.data.scraper.failures == 0


async def test_an_untrusted_certificate_is_a_502_that_names_the_ca_option(
    tls_server: tuple[Server, trustme.CA],
) -> None:
    server, _ = tls_server
    # Scraped about once a second, so the endpoint is still in rotation (3 failures take it out)
    # when the proxy meets the certificate.
    section = MmgateSection(endpoints=[f"https://127.0.0.1:{server.port}"], scrapeIntervalMs=1000)
    gateway, status, body, _ = await run_gateway(section)
    assert status == 502
    assert b"certificate" in body and b"was not verified" in body and b"mmgate.upstreamTLS.caFile" in body
    assert server.peers == []
    assert gateway.data.scraper.failures >= 1  # the scraper refused it too


def test_a_missing_or_unusable_ca_file_is_a_config_error(tmp_path: Path) -> None:
    missing = MmgateSection(upstreamTLS=UpstreamTLSSpec(caFile=str(tmp_path / "nope.pem")))
    with pytest.raises(
        ConfigError, match=r"mmgate\.upstreamTLS\.caFile: CA file '.*nope\.pem' does not exist"
    ):
        settings_of(missing)
    junk = tmp_path / "junk.pem"
    junk.write_text("not a certificate\n")
    with pytest.raises(ConfigError, match="no usable PEM certificate"):
        settings_of(MmgateSection(upstreamTLS=UpstreamTLSSpec(caFile=str(junk))))
    settings = settings_of(MmgateSection(upstreamTLS=UpstreamTLSSpec(insecureSkipVerify=True)))
    context = settings.proxy.ssl_context
    assert context is not None and context.verify_mode == ssl.CERT_NONE
    assert settings.data.ssl_context is context  # the scraper trusts exactly what the proxy trusts
    default = settings_of(MmgateSection()).proxy.ssl_context
    assert default is not None and default.verify_mode == ssl.CERT_REQUIRED and default.check_hostname
