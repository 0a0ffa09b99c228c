"""``mmgate sidecar``: the routing sidecar beside a decode (or PD) server, in llm-d's contract.

The gateway's scheduler names the stage pods in ``x-encoder-hosts-ports`` and
``x-prefiller-host-port``; the sidecar reads and strips them, runs the encode and prefill legs
(:mod:`mmgate.disagg.orchestrate`, the code the gateway runs in ``orchestrator: gateway`` mode) and
forwards the decode request to its local server. It contacts only hosts on its allow-list: a
header naming another host (a client that reached the sidecar directly, a compromised hop) is
refused for that host, counted in ``mmgate_disagg_refused_hosts_total`` and logged, and the request
goes on without it (never to that host). When the gateway asks (``x-mmgate-stage-hints: 103``,
set by ``mmgate serve`` in ``orchestrator: sidecar`` mode), a ``103`` interim response names each
stage pod as its legs end (``x-mmgate-stage-done``): the gateway then stops counting the
request's work on that pod, instead of at the first token, after the decode pod's own queue.

Every other request (``/metrics``, ``/v1/models``, ``/health`` of the model server, any other API)
is passed through to the local server unchanged, so the gateway scrapes and probes the pod through
the sidecar's port as llm-d's does; those scrapes and probes are counted apart (``kind="probe"``).
The sidecar's own ``/health``, ``/ready`` (its upstream answers ``/health``) and ``/metrics`` are
on the admin port.
"""

from __future__ import annotations

import logging
from collections.abc import Collection
from dataclasses import dataclass, field
from functools import partial
from urllib.parse import urlsplit

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, generate_latest

from mmgate.control.parser import PARSED_HEADERS, make_parser
from mmgate.disagg.orchestrate import (
    OrchestrationSettings,
    Orchestrator,
    PoolTransport,
    StageFailed,
    StageMetrics,
    strip_transfer_fields,
)
from mmgate.disagg.stages import AllowList, stages_from
from mmgate.errors import RequestError
from mmgate.http.client import UpstreamError, UpstreamPool
from mmgate.http.headers import (
    REQUEST_ID,
    STAGE_DONE,
    STAGE_HINTS,
    relay_headers,
    request_id_from,
    upstream_headers,
)
from mmgate.http.request import Request
from mmgate.http.responses import Response, error_response, json_response
from mmgate.http.server import HttpServer, ServerLimits
from mmgate.http.writer import ResponseWriter
from mmgate.request.limits import DEFAULT_LIMITS
from mmgate.request.view import Api

log = logging.getLogger("mmgate.sidecar")

# What a gateway asks of the pod through the sidecar on its own, many times a second (metrics
# scrapes, health checks, the model list): counted as kind="probe", so "passthrough" stays the
# client requests the sidecar passed on without running a leg.
PROBE_PATHS = frozenset({"/metrics", "/health", "/v1/models", "/ping", "/version"})

ORCHESTRATED = {"/v1/chat/completions": Api.CHAT}
"""The APIs whose media the sidecar fans out (the other APIs pass through)."""


@dataclass(slots=True)
class SidecarSettings:
    upstream: str  # the local model server, http://host:port
    allow: Collection[str]  # host:port (or CIDR:port) entries the legs may contact
    host: str = "0.0.0.0"
    port: int = 8000
    admin_port: int = 9091
    orchestration: OrchestrationSettings = field(default_factory=OrchestrationSettings)
    connect_timeout_s: float = 3.0
    read_timeout_s: float = 300.0
    limits: ServerLimits = field(default_factory=lambda: ServerLimits(single_valued_headers=PARSED_HEADERS))


class Sidecar:
    def __init__(self, settings: SidecarSettings) -> None:
        parts = urlsplit(settings.upstream if "://" in settings.upstream else f"http://{settings.upstream}")
        if parts.scheme != "http" or not parts.hostname or parts.port is None:
            raise ValueError(f"--upstream must be http://host:port, not {settings.upstream!r}")
        self.settings = settings
        self.upstream = (parts.hostname, parts.port)
        self.allow = AllowList(settings.allow)
        self.registry = CollectorRegistry()
        self.stage_metrics = StageMetrics(self.registry)
        self.requests = Counter(
            "mmgate_sidecar_requests",
            "Requests answered, by kind (disaggregated, api, passthrough, probe) and status",
            ["kind", "status"], registry=self.registry,
        )  # fmt: skip
        self._parse = make_parser(DEFAULT_LIMITS)
        self._pool: UpstreamPool | None = None
        self._orchestrator: Orchestrator | None = None
        self._servers: list[HttpServer] = []
        self.port = settings.port
        self.admin_port = settings.admin_port

    @property
    def url(self) -> str:
        return f"http://{self.settings.host}:{self.port}"

    async def start(self) -> None:
        s = self.settings
        self._pool = UpstreamPool(connect_timeout_s=s.connect_timeout_s, read_timeout_s=s.read_timeout_s)
        transport = PoolTransport(self._pool)
        self._orchestrator = Orchestrator(transport, s.orchestration, metrics=self.stage_metrics)
        api = HttpServer(self._handle, s.limits)
        admin = HttpServer(self._admin, s.limits)
        self._servers = [api, admin]
        self.port = await api.listen(s.host, s.port)
        self.admin_port = await admin.listen(s.host, s.admin_port)

    async def stop(self) -> None:
        for server in self._servers:
            await server.close(1.0)
        self._servers = []
        if self._pool is not None:
            await self._pool.close()
            self._pool = None

    # -- admin port -----------------------------------------------------------------------------

    async def _admin(self, request: Request, writer: ResponseWriter) -> None:
        if request.path == "/health":
            writer.send(json_response({"status": "ok"}))
        elif request.path == "/ready":
            ready = await self._upstream_healthy()
            writer.send(json_response({"ready": ready}, status=200 if ready else 503))
        elif request.path == "/metrics":
            writer.send(Response(200, generate_latest(self.registry), CONTENT_TYPE_LATEST))
        else:
            writer.send(error_response(404, f"Not Found: {request.method} {request.path}"))

    async def _upstream_healthy(self) -> bool:
        assert self._pool is not None
        try:
            upstream = await self._pool.request(*self.upstream, "GET", "/health", [], b"")
        except (UpstreamError, OSError, TimeoutError):
            return False
        while await upstream.read():
            pass
        upstream.release()
        return upstream.status == 200

    # -- API port -------------------------------------------------------------------------------

    async def _handle(self, request: Request, writer: ResponseWriter) -> None:
        assert self._orchestrator is not None
        request_id = request_id_from(request.headers)
        headers = upstream_headers(request.headers.raw, request_id)  # routing headers stripped
        api = ORCHESTRATED.get(request.path) if request.method == "POST" else None
        body = request.body
        whole = False
        kind = "passthrough"
        if request.method in ("GET", "HEAD") and request.path in PROBE_PATHS:
            kind = "probe"  # the gateway's scrapes and health checks, not client traffic
        if api is not None:
            kind = "api"
            stages = stages_from(request.headers, allow=self.allow, metrics=self.stage_metrics)
            if stages.any:
                try:
                    view = self._parse(body, request.headers, api)
                except RequestError:
                    view = None  # the model server answers the client's mistake itself
                if view is not None:
                    released = None
                    if request.headers.get(STAGE_HINTS) == "103":
                        released = partial(_stage_done, writer)
                    try:
                        prepared = await self._orchestrator.prepare(
                            body, view, stages, headers, request_id, released=released
                        )
                    except StageFailed as exc:
                        rid = {REQUEST_ID: request_id}
                        writer.send(error_response(503, str(exc), code="stage_unavailable", headers=rid))
                        self.requests.labels(kind, "503").inc()
                        return
                    body = prepared.body
                    whole = not view.stream
                    kind = "disaggregated"
        status = await self._forward(request, writer, headers, body, whole=whole)
        self.requests.labels(kind, str(status)).inc()

    async def _forward(
        self,
        request: Request,
        writer: ResponseWriter,
        headers: list[tuple[str, str]],
        body: bytes,
        *,
        whole: bool,
    ) -> int:
        """Send to the local server and relay its answer (``whole``: read to the end and sent
        without transfer parameters, which only the stages read)."""
        assert self._pool is not None
        try:
            upstream = await self._pool.request(*self.upstream, request.method, request.target, headers, body)
        except (UpstreamError, OSError, TimeoutError) as exc:
            log.warning("local server unreachable: %s", exc)
            writer.send(
                error_response(502, "the local model server did not answer", code="upstream_unavailable")
            )
            return 502
        out, length = relay_headers(upstream.headers)
        # A HEAD answer is its head alone (RFC 9110 9.3.2), whatever the local server's headers say.
        writer.head_only = request.method == "HEAD"
        try:
            if whole:
                pieces = []
                while chunk := await upstream.read():
                    pieces.append(chunk)
                data = strip_transfer_fields(b"".join(pieces))
                writer.start(upstream.status, out, content_length=len(data))
                writer.end(data)
            else:
                writer.start(upstream.status, out, content_length=length)
                while chunk := await upstream.read():
                    await writer.write(chunk)
                writer.end()
        except (UpstreamError, TimeoutError):
            upstream.close()
            writer.abort()  # a broken upstream answer must look broken to the client
            return upstream.status
        except ConnectionError:
            upstream.close()  # the client left: closing cancels the work upstream
            return upstream.status
        upstream.release()
        return upstream.status


def _stage_done(writer: ResponseWriter, host: str) -> None:
    """The request's legs on ``host`` are over: a ``103`` says so to the gateway that asked
    (``x-mmgate-stage-hints``), which releases the pod's share of the request at once."""
    writer.interim(103, ((STAGE_DONE, host),))
