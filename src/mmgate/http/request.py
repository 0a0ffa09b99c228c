"""One received HTTP request: method, target, headers and the whole body, as the handler sees it."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Final, TypeVar, overload

_T = TypeVar("_T")

SINGLE_VALUED: Final = frozenset(
    (
        "host",
        "authorization",
        "x-api-key",
        "content-type",
        "expect",
        "x-request-id",
    )
)
"""Headers a relay reads (and forwards): a second copy is refused, since the relay would act on
the first while the model server may read another (RFC 9110 §5.3: a field that is not a list
must not repeat). ``Content-Length`` and ``Transfer-Encoding`` llhttp refuses itself. An
application adds the ones it reads itself (``ServerLimits.single_valued_headers``)."""


class Headers(Mapping[str, str]):
    """Request headers as received, looked up case-insensitively.

    As a mapping the keys are lower-case names and a repeated header yields its first value;
    :attr:`repeated` names the first of ``single_valued`` that came twice (the server refuses
    such a request), so what the gateway reads is what it forwards. :attr:`raw` keeps every pair
    with its original spelling, in order, for forwarding.
    """

    __slots__ = ("_lower", "raw", "repeated")

    def __init__(self, raw: list[tuple[str, str]], single_valued: frozenset[str] = SINGLE_VALUED) -> None:
        self.raw = raw
        self.repeated: str | None = None
        lower: dict[str, str] = {}
        for name, value in raw:
            key = name.lower()
            if key not in lower:
                lower[key] = value
            elif self.repeated is None and key in single_valued:  # only a repeat pays for the check
                self.repeated = key
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
