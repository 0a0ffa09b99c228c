"""The cheapest conforming ext_proc picker: the bound on what any picker can reach behind Envoy.

``mmgate bench overhead --envoy-picker LB/BODY/null`` puts this in ``mmgate extproc``'s place,
behind the same Envoy configuration. It does what the protocol requires of a picker and nothing
else: no parsing of the request, no scheduling, no bookkeeping.

- request headers: the routing answer at once, the destination alternating over the upstreams
  (in the header and the ``envoy.lb`` metadata, as the endpoint-picker protocol asks);
- each request or response body chunk: sent straight back unchanged (``FULL_DUPLEX_STREAMED``:
  what the picker does not send back, the upstream or the client never gets), in answers of at
  most 62,000 bytes as ``mmgate extproc`` and llm-d's picker send them;
- response headers and trailers: empty answers; ``Health/Check``: SERVING.

``--whole-chunks`` (``GRPC`` given as ``null-whole``) sends each chunk back in one answer as it
came (Envoy sends a request body in messages of up to a megabyte): fewer messages for Envoy to
parse, the cheapest answer the protocol allows.

It runs on mmgate's own HTTP/2 layer and hand-written messages (:mod:`mmgate.http.h2`,
:mod:`mmgate.gateway.extproc.wire`, the framing of :mod:`mmgate.gateway.extproc.lean`: compiled
in the mypyc build), so Envoy plus this process is what the ext_proc path costs when the picker's
own work is nothing. It answers the headers before the body arrives, which a picker that reads the
body to decide cannot: that only makes the bound looser (Envoy can start the upstream request
while the body still crosses the picker).
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Sequence
from typing import Final

from mmgate.gateway.extproc import lean, messages, wire
from mmgate.gateway.malloc_tuning import keep_large_buffers
from mmgate.http import h2, hpack
from mmgate.process import run_forever, wait_for_signal

Buffer = bytes | memoryview

# The first byte of a ProcessingRequest: the key of its ``request`` oneof member (Envoy writes
# fields in number order, and the oneof's 2..7 come before metadata_context's 8).
REQUEST_HEADERS: Final = 2 << 3 | 2
RESPONSE_HEADERS: Final = 3 << 3 | 2
REQUEST_TRAILERS: Final = 6 << 3 | 2
RESPONSE_TRAILERS: Final = 7 << 3 | 2
SERVING: Final = 1  # grpc.health.v1.HealthCheckResponse.ServingStatus

EMPTY_RESPONSE_HEADERS: Final = wire.response_headers([])
INVALID_ARGUMENT: Final = hpack.encode([(b"grpc-status", b"3"), (b"grpc-message", b"not understood")])


class _Echo:
    """One ``Process`` stream: routed at its headers, every body chunk sent back as it came."""

    __slots__ = ("_conn", "_id", "_messages", "_route", "_whole")

    def __init__(self, conn: h2.Connection, stream_id: int, route: bytes, whole: bool) -> None:
        self._conn = conn
        self._id = stream_id
        self._messages = lean.MessageReader()
        self._route = route
        self._whole = whole  # each chunk back in one answer, however large
        conn.send_headers(stream_id, lean.RESPONSE_HEADERS)

    def on_data(self, data: Buffer, end: bool) -> None:
        answers: list[messages.Answer] = []
        for raw in self._messages.feed(data) if data else []:
            answer = self._answer(raw)
            if answer is None:
                self._conn.send_headers(self._id, INVALID_ARGUMENT, end=True)
                return
            answers.extend(answer)
        if answers:
            self._conn.send_data(self._id, lean.framed(answers))
        if end:
            self._conn.send_headers(self._id, lean.OK_TRAILERS, end=True)

    def _answer(self, raw: list[memoryview]) -> Sequence[messages.Answer] | None:
        first = raw[0][0] if raw else -1
        if first == REQUEST_HEADERS:
            return [self._route]
        if first == RESPONSE_HEADERS:
            return [EMPTY_RESPONSE_HEADERS]
        if first == REQUEST_TRAILERS:
            return [messages.request_trailers()]
        if first == RESPONSE_TRAILERS:
            return [messages.response_trailers()]
        chunk = wire.body_chunk(raw)
        if chunk is None:
            return None
        kind, body, end = chunk
        out = wire.REQUEST_BODY_OUT if kind == wire.REQUEST_CHUNK else wire.RESPONSE_BODY_OUT
        if self._whole:
            size = 0
            for piece in body:
                size += len(piece)
            return [wire.streamed_body(out, body, size, end)]
        return wire.echoed(out, body, end=end)

    def on_reset(self) -> None:
        pass


class _Serving:
    """``Health/Check``: SERVING, whatever the service."""

    def __init__(self, conn: h2.Connection, stream_id: int) -> None:
        answer = wire.health_answer(SERVING)
        conn.send_headers(stream_id, lean.RESPONSE_HEADERS)
        conn.send_data(stream_id, lean.framed([answer]))
        conn.send_headers(stream_id, lean.OK_TRAILERS, end=True)

    def on_data(self, data: Buffer, end: bool) -> None:
        pass

    def on_reset(self) -> None:
        pass


def routes(endpoints: Sequence[str]) -> list[bytes]:
    """The routing answer for each endpoint (``host:port``), built once."""
    return [wire.routing(wire.REQUEST_HEADERS_OUT, endpoint, [], []) for endpoint in endpoints]


def protocol(endpoints: Sequence[str], whole: bool = False) -> h2.Connection:
    """A connection serving ``Process`` (streams alternate over ``endpoints``; ``whole``: each
    body chunk echoed in one answer as it came, not split at 62,000 bytes) and ``Health``."""
    answers = routes(endpoints)
    turn = [0]

    def open_stream(conn: h2.Connection, stream_id: int, headers: list[hpack.Header], end: bool) -> h2.Stream:
        path = next((v for k, v in headers if k == b":path"), b"")
        stream: h2.Stream
        if path == lean.PROCESS:
            turn[0] = (turn[0] + 1) % len(answers)
            stream = _Echo(conn, stream_id, answers[turn[0]], whole)
        else:
            stream = _Serving(conn, stream_id)
        if end:
            stream.on_data(b"", True)
        return stream

    return h2.Connection(open_stream)


async def serve(host: str, port: int, endpoints: Sequence[str], whole: bool) -> None:
    """Serve until SIGTERM or SIGINT."""
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: protocol(endpoints, whole), host, port)
    try:
        await wait_for_signal()
    finally:
        server.close()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--port", type=int, required=True, help="the gRPC port Envoy's ext_proc filter calls")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument(
        "--endpoints", required=True, help="comma-separated upstream host:port to alternate over"
    )
    parser.add_argument(
        "--whole-chunks",
        action="store_true",
        help="echo each body chunk in one answer as it came (Envoy sends up to a megabyte), "
        "not in answers of at most 62,000 bytes",
    )
    args = parser.parse_args(argv)
    endpoints = [e.strip().removeprefix("http://") for e in args.endpoints.split(",") if e.strip()]
    if not endpoints:
        parser.error("--endpoints: at least one host:port")
    keep_large_buffers()  # as mmgate extproc: the body crosses as megabytes
    run_forever(lambda: serve(args.host, args.port, endpoints, args.whole_chunks))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
