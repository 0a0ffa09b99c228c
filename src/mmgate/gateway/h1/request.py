"""One received HTTP request: method, target, headers and the whole body, as the handler sees it."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TypeVar, overload

_T = TypeVar("_T")


class Headers(Mapping[str, str]):
    """Request headers as received, looked up case-insensitively.

    As a mapping the keys are lower-case names and a repeated header yields its first value (as
    aiohttp's ``CIMultiDict.get`` did); :attr:`raw` keeps every pair with its original spelling,
    in order, for forwarding.
    """

    __slots__ = ("_lower", "raw", "repeated_host")

    def __init__(self, raw: list[tuple[str, str]]) -> None:
        self.raw = raw
        self.repeated_host = False  # RFC 9112 §3.2: a request with two Hosts is refused
        lower: dict[str, str] = {}
        for name, value in raw:
            key = name.lower()
            if key not in lower:
                lower[key] = value
            elif key == "host":
                self.repeated_host = True
        self._lower = lower

    def __getitem__(self, name: str) -> str:
        return self._lower[name.lower()]

    @overload
    def get(self, name: str, /) -> str | None: ...
    @overload
    def get(self, name: str, default: str, /) -> str: ...
    @overload
    def get(self, name: str, default: _T, /) -> str | _T: ...
    def get(self, name: str, default: object = None, /) -> object:
        return self._lower.get(name.lower(), default)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name.lower() in self._lower

    def __iter__(self) -> Iterator[str]:
        return iter(self._lower)

    def __len__(self) -> int:
        return len(self._lower)

    def __repr__(self) -> str:
        return f"Headers({self.raw!r})"


class Request:
    """A complete request. ``target`` is the request-target as sent (path and query, undecoded);
    ``path`` is its path alone. ``body`` is the whole body (``b""`` when there is none)."""

    __slots__ = ("body", "headers", "method", "path", "remote", "target", "version")

    def __init__(
        self,
        method: str,
        target: str,
        path: str,
        headers: Headers,
        body: bytes,
        remote: str | None,
        version: str,
    ) -> None:
        self.method = method
        self.target = target
        self.path = path
        self.headers = headers
        self.body = body
        self.remote = remote
        self.version = version

    def __repr__(self) -> str:
        return f"<Request {self.method} {self.target} HTTP/{self.version}>"
