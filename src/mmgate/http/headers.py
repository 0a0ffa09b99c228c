"""Which request and response headers cross the gateway, and which never do.

Routing headers tell a sidecar or an Envoy where to send work (llm-d's names, plus our own
``x-mmgate-`` family). Only the gateway may set them: a client that sends one could steer its
request to any host the sidecar can reach, so every client copy is dropped.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping, Sequence

# llm-d's routing headers (pkg/common/routing) and the GIE destination header.
LLMD_ROUTING_HEADERS = frozenset(
    {
        "x-gateway-destination-endpoint",
        "x-gateway-destination-endpoint-served",
        "x-prefiller-host-port",
        "x-encoder-hosts-ports",
        "x-data-parallel-host-port",
        "x-kv-cache-source-host-port",
        "test-epp-endpoint-selection",
    }
)
MMGATE_PREFIX = "x-mmgate-"
# Clients may *ask* for the debug scores; this one is read, then dropped like the others.
DEBUG_REQUEST_HEADER = "x-mmgate-debug"

# RFC 9110 §7.6.1 connection-specific headers, plus the framing the gateway sets itself.
HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-connection",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
        "expect",  # 100-continue was answered to the client; the body is already read
    }
)

_NOT_FORWARDED = HOP_BY_HOP | LLMD_ROUTING_HEADERS | {"x-request-id"}

# W3C Trace Context (https://www.w3.org/TR/trace-context/): with tracing on the gateway replaces
# the client's pair with its own; with it off both pass through as any end-to-end header.
TRACE_CONTEXT_HEADERS = frozenset({"traceparent", "tracestate"})

RESPONSE_ENDPOINT = "x-mmgate-endpoint"
RESPONSE_TOKENS = "x-mmgate-request-tokens"
RESPONSE_SCORES = "x-mmgate-scores"
RESPONSE_ENCODE = "x-mmgate-encode"  # debug mode: where the media were encoded, and why
RESPONSE_ENCODE_COST = "x-mmgate-encode-cost"  # debug mode: the costs that choice compared
REQUEST_ID = "x-request-id"
STAGE_HINTS = "x-mmgate-stage-hints"
"""The gateway asks a routing sidecar (``orchestrator: sidecar``) to tell it, in a ``103``
interim response per stage pod (RFC 9110 §15.2), as soon as the request's legs on that pod
ended: without it the gateway sees a sidecar's legs end only at the first token, and counts the
decode pod's queue as the stage pods' work. Value ``103``; only the gateway may set it."""
STAGE_DONE = "x-mmgate-stage-done"
"""In a sidecar's ``103``: the ``host:port`` (as the routing headers named it) whose legs for
the request are all over."""

_SAFE_ID = re.compile(r"[A-Za-z0-9._:\-]{1,128}")


def is_routing_header(lower_name: str) -> bool:
    return lower_name in LLMD_ROUTING_HEADERS or lower_name.startswith(MMGATE_PREFIX)


def _listed(value: str, into: set[str] | None) -> set[str] | None:
    """``into`` plus the header names a ``Connection`` value lists (besides close/keep-alive)."""
    for token in value.split(","):
        name = token.strip().lower()
        if name and name not in ("close", "keep-alive"):
            if into is None:
                into = set()
            into.add(name)
    return into


def _without(headers: list[tuple[str, str]], names: set[str]) -> list[tuple[str, str]]:
    return [(name, value) for name, value in headers if name.lower() not in names]


_KEEP, _DROP, _CONNECTION = 0, 1, 2
_FATES: dict[str, int] = {}  # header name as sent -> what upstream_headers does with it
_FATES_MAX = 512  # names are the client's choice: past this many, the rest are worked out each time


def _fate(name: str) -> int:
    lower = name.lower()
    if lower == "connection":
        fate = _CONNECTION
    elif lower in _NOT_FORWARDED or lower.startswith(MMGATE_PREFIX):
        fate = _DROP
    else:
        fate = _KEEP
    if len(_FATES) < _FATES_MAX:
        _FATES[name] = fate
    return fate


def upstream_headers(client: Iterable[tuple[str, str]], request_id: str) -> list[tuple[str, str]]:
    """The headers sent upstream: the client's, minus hop-by-hop and routing ones (framing and
    Host are set by the upstream pool), and minus any header the client named in ``Connection``
    (RFC 9110 §7.6.1; a second pass, only for a request that names one).

    ``Authorization`` and other end-to-end headers pass through untouched (never logged). Each
    name's fate is remembered as sent (clients send the same dozen names on every request), so
    a request's headers cost a lookup each instead of a lower-casing and two tests.
    """
    out: list[tuple[str, str]] = []
    listed: set[str] | None = None  # allocated only for a message whose Connection names one
    fates = _FATES
    for name, value in client:
        fate = fates.get(name)
        if fate is None:
            fate = _fate(name)
        if fate == _KEEP:
            out.append((name, value))
        elif fate == _CONNECTION:
            listed = _listed(value, listed)
    if listed is not None:
        out = _without(out, listed)
    out.append((REQUEST_ID, request_id))
    return out


def with_trace_context(
    headers: list[tuple[str, str]], trace_context: Sequence[tuple[str, str]]
) -> list[tuple[str, str]]:
    """``headers`` with ``trace_context`` (the gateway's ``traceparent``/``tracestate``) in place
    of any the client sent."""
    out = [(name, value) for name, value in headers if name.lower() not in TRACE_CONTEXT_HEADERS]
    out.extend(trace_context)
    return out


def relay_headers(upstream: Iterable[tuple[str, str]]) -> tuple[list[tuple[str, str]], int | None]:
    """The upstream response headers a client may see, and the upstream's Content-Length (the
    gateway's writer frames the response itself: length when known, else chunked). Headers the
    upstream named in ``Connection`` are hop-by-hop too and stay behind."""
    out: list[tuple[str, str]] = []
    length: int | None = None
    listed: set[str] | None = None  # allocated only for a message whose Connection names one
    for name, value in upstream:
        lower = name.lower()
        if lower == "content-length":
            length = int(value) if value.isdigit() else None
        elif lower in HOP_BY_HOP or lower.startswith(MMGATE_PREFIX) or lower in ("server", "date"):
            if lower == "connection":
                listed = _listed(value, listed)
        else:
            out.append((name, value))
    if listed is not None:
        out = _without(out, listed)
        if "content-length" in listed:
            length = None
    return out, length


def request_id_from(headers: Mapping[str, str]) -> str:
    """The client's ``x-request-id`` when it is a short safe token, else a fresh one."""
    given = headers.get(REQUEST_ID)
    if given and _SAFE_ID.fullmatch(given):
        return given
    return os.urandom(16).hex()  # 32 hex digits like uuid4().hex, a quarter of the cost
