"""The opt-in URL probe: fetch the first bytes of a media URL, safely, so its header can be probed.

By default the gateway never fetches a URL (SSRF and latency). When an operator turns this on,
every fetch is bounded and guarded:

- only ``http``/``https`` URLs whose host is on the allow-list (``example.com`` matches exactly,
  ``*.example.com`` matches its subdomains);
- the host is resolved once and **every** address must be public: private, loopback, link-local
  (cloud metadata at 169.254.169.254), multicast, reserved and unspecified addresses are refused
  unless ``allow_private`` says otherwise; the connection then goes to those checked addresses
  only (a second DNS answer cannot rebind it);
- at most ``max_bytes`` are read (a ``Range`` request, and a hard cut whatever the server sends),
  within ``timeout_s`` for the whole exchange; redirects are not followed;
- answers (and refusals) are cached per URL for ``cache_ttl_s``, at most ``cache_entries`` of
  them, so a hot URL is fetched once; requests asking for a URL being fetched share that fetch.

Every answer has an ``outcome`` (``hit`` from the cache, ``miss`` fetched now, ``refused``,
``timeout``, ``failed``) reported to ``on_outcome`` (the gateway counts them in
``mmgate_url_probe_total``).

A refusal or failure is never the client's error: the asset stays "unprobed" and is priced with
the configured default, exactly as when probing is off.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import urlsplit

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult


@dataclass(frozen=True, slots=True)
class UrlProbeSettings:
    enabled: bool = False
    allow_hosts: tuple[str, ...] = ()
    allow_private: bool = False
    max_bytes: int = 64 * 1024
    timeout_s: float = 1.0
    cache_entries: int = 4096
    cache_ttl_s: float = 300.0


class ProbeRefused(Exception):
    """The URL may not be fetched (scheme, host, address); the message says why."""


@dataclass(slots=True)
class ProbeResult:
    url: str
    head: bytes | None  # the first bytes, or None when refused / failed
    reason: str = ""  # why there are no bytes
    outcome: str = "miss"  # hit, miss, refused, timeout, failed


def host_allowed(host: str, allow: tuple[str, ...]) -> bool:
    host = host.lower().rstrip(".")
    for pattern in allow:
        p = pattern.lower().rstrip(".")
        if p.startswith("*.") and host.endswith(p[1:]) and host != p[2:]:
            return True
        if host == p:
            return True
    return False


def address_allowed(address: str, allow_private: bool) -> bool:
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if allow_private:
        return not (ip.is_multicast or ip.is_unspecified)
    return ip.is_global and not (ip.is_multicast or ip.is_reserved or ip.is_unspecified)


class _PinnedResolver(AbstractResolver):
    """Hands aiohttp exactly the addresses that were checked, nothing else."""

    def __init__(self, host: str, infos: list[ResolveResult]) -> None:
        self.host = host
        self.infos = infos

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        if host != self.host:
            raise OSError(f"unexpected host {host!r}")
        return [{**info, "port": port} for info in self.infos]

    async def close(self) -> None:
        return None


class UrlProber:
    def __init__(
        self,
        settings: UrlProbeSettings,
        *,
        on_outcome: Callable[[str], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings
        self._on_outcome = on_outcome
        self._clock = clock
        self._cache: OrderedDict[str, tuple[float, ProbeResult]] = OrderedDict()  # url -> (expiry, result)
        self._pending: dict[str, asyncio.Task[ProbeResult]] = {}

    async def check(self, url: str) -> tuple[str, int, list[ResolveResult]]:
        """Validate ``url`` and resolve its host; raises :class:`ProbeRefused`."""
        s = self.settings
        if not s.enabled:
            raise ProbeRefused("URL probing is off")
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https"):
            raise ProbeRefused(f"scheme {parts.scheme!r} is not probed")
        host = parts.hostname
        if not host or not host_allowed(host, s.allow_hosts):
            raise ProbeRefused(f"host {host!r} is not on the allow-list")
        port = parts.port or (443 if parts.scheme == "https" else 80)
        loop = asyncio.get_running_loop()
        try:
            infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except OSError as exc:
            raise ProbeRefused(f"cannot resolve {host!r}: {exc}") from None
        results: list[ResolveResult] = []
        for family, _type, proto, _canon, sockaddr in infos:
            address = str(sockaddr[0])
            if not address_allowed(address, s.allow_private):
                raise ProbeRefused(f"{host!r} resolves to a non-public address {address}")
            results.append(
                {
                    "hostname": host,
                    "host": address,
                    "port": port,
                    "family": family,
                    "proto": proto,
                    "flags": 0,
                }
            )
        if not results:
            raise ProbeRefused(f"{host!r} has no address")
        return host, port, results

    async def fetch_head(self, url: str) -> ProbeResult:
        """The first ``max_bytes`` of ``url``, or a refusal/failure reason (cached either way).

        A caller that is cancelled (or stops waiting) leaves the fetch running for the others;
        the fetch itself never outlives ``timeout_s``."""
        cached = self._cache.get(url)
        if cached is not None and cached[0] > self._clock():
            self._cache.move_to_end(url)
            self._report("hit")
            return replace(cached[1], outcome="hit")
        task = self._pending.get(url)
        if task is None:
            task = asyncio.ensure_future(self._fetch_and_keep(url))
            self._pending[url] = task
        return await asyncio.shield(task)

    async def _fetch_and_keep(self, url: str) -> ProbeResult:
        try:
            result = await self._fetch(url)
        finally:
            self._pending.pop(url, None)
        self._report(result.outcome)
        self._cache[url] = (self._clock() + self.settings.cache_ttl_s, result)
        self._cache.move_to_end(url)
        while len(self._cache) > self.settings.cache_entries:
            self._cache.popitem(last=False)
        return result

    def _report(self, outcome: str) -> None:
        if self._on_outcome is not None:
            self._on_outcome(outcome)

    async def _fetch(self, url: str) -> ProbeResult:
        s = self.settings
        try:
            async with asyncio.timeout(s.timeout_s):
                host, _port, infos = await self.check(url)
                connector = aiohttp.TCPConnector(resolver=_PinnedResolver(host, infos), use_dns_cache=False)
                headers: dict[str, Any] = {
                    "Range": f"bytes=0-{s.max_bytes - 1}",
                    "Accept-Encoding": "identity",
                }
                async with (
                    aiohttp.ClientSession(connector=connector, auto_decompress=False) as session,
                    session.get(url, headers=headers, allow_redirects=False) as resp,
                ):
                    if resp.status not in (200, 206):
                        return ProbeResult(url, None, f"HTTP {resp.status}", "failed")
                    head = b""
                    while len(head) < s.max_bytes:
                        chunk = await resp.content.read(s.max_bytes - len(head))
                        if not chunk:
                            break
                        head += chunk
                    return ProbeResult(url, head[: s.max_bytes])
        except ProbeRefused as exc:
            return ProbeResult(url, None, f"refused: {exc}", "refused")
        except TimeoutError:
            return ProbeResult(url, None, f"no answer within {s.timeout_s:g} s", "timeout")
        except (aiohttp.ClientError, OSError) as exc:
            return ProbeResult(url, None, f"{type(exc).__name__}: {exc}", "failed")


__all__ = ["ProbeRefused", "ProbeResult", "UrlProbeSettings", "UrlProber", "address_allowed", "host_allowed"]
