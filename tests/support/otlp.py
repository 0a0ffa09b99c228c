"""A real OTLP/HTTP trace receiver on loopback: what an OpenTelemetry collector's ``otlp`` receiver
does on port 4318, in a thread (the SDK exports from its own thread, blocking), decoding each
``ExportTraceServiceRequest`` with the opentelemetry-proto package."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

KINDS = {
    Span.SPAN_KIND_INTERNAL: "internal",
    Span.SPAN_KIND_SERVER: "server",
    Span.SPAN_KIND_CLIENT: "client",
}
STATUS = {Status.STATUS_CODE_UNSET: "unset", Status.STATUS_CODE_OK: "ok", Status.STATUS_CODE_ERROR: "error"}


@dataclass(frozen=True)
class ExportedSpan:
    """One span as the collector received it (ids as lower-case hex, as in ``traceparent``)."""

    name: str
    trace_id: str
    span_id: str
    parent_id: str  # "" for a root span
    kind: str
    status: str
    status_message: str
    attributes: dict[str, Any]
    service: str
    start_ns: int
    end_ns: int


def _value(value: AnyValue) -> Any:
    which = value.WhichOneof("value")
    return getattr(value, which) if which is not None else None


@dataclass
class OtlpReceiver:
    """``with OtlpReceiver() as otlp:`` — ``otlp.url`` is the base URL to configure
    (``http://127.0.0.1:PORT``); ``otlp.spans`` everything received so far."""

    exports: int = 0
    paths: list[str] = field(default_factory=list)
    _spans: list[ExportedSpan] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self._server is not None, "use it as a context manager"
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    @property
    def spans(self) -> list[ExportedSpan]:
        with self._lock:
            return list(self._spans)

    def named(self, name: str) -> list[ExportedSpan]:
        return [s for s in self.spans if s.name == name]

    def children(self, parent: ExportedSpan) -> list[ExportedSpan]:
        return [s for s in self.spans if s.parent_id == parent.span_id and s.trace_id == parent.trace_id]

    def receive(self, path: str, body: bytes) -> None:
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        got: list[ExportedSpan] = []
        for resource_spans in request.resource_spans:
            resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
            for scope in resource_spans.scope_spans:
                got.extend(self._decoded(span, str(resource.get("service.name", ""))) for span in scope.spans)
        with self._lock:
            self.exports += 1
            self.paths.append(path)
            self._spans.extend(got)

    @staticmethod
    def _decoded(span: Span, service: str) -> ExportedSpan:
        return ExportedSpan(
            name=span.name,
            trace_id=span.trace_id.hex(),
            span_id=span.span_id.hex(),
            parent_id=span.parent_span_id.hex(),
            kind=KINDS.get(span.kind, str(span.kind)),
            status=STATUS.get(span.status.code, str(span.status.code)),
            status_message=span.status.message,
            attributes={a.key: _value(a.value) for a in span.attributes},
            service=service,
            start_ns=span.start_time_unix_nano,
            end_ns=span.end_time_unix_nano,
        )

    def __enter__(self) -> OtlpReceiver:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length)
                if self.headers.get("Content-Type") != "application/x-protobuf":
                    self.send_error(415, "OTLP/HTTP protobuf only")
                    return
                receiver.receive(self.path, body)
                answer = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, format: str, *args: Any) -> None:  # quiet
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


def tree(spans: list[ExportedSpan], root: ExportedSpan) -> Iterator[tuple[int, ExportedSpan]]:
    """``root`` and its descendants depth first, with their depth (for printing a trace)."""
    stack = [(0, root)]
    while stack:
        depth, span = stack.pop()
        yield depth, span
        kids = sorted(
            (s for s in spans if s.parent_id == span.span_id), key=lambda s: s.start_ns, reverse=True
        )
        stack.extend((depth + 1, k) for k in kids)
