"""Forwarding one request: pick, send the original bytes, stream the answer back, retry early.

The body is sent as the very ``bytes`` object the client sent (no re-serialisation, no copy), or,
when the gateway wrote media uuids into it, as :class:`~mmgate.request.pieces.BodyPieces` of those
bytes in one vectored write (still no copy, on every attempt alike), over a keep-alive
:class:`~mmgate.http.client.UpstreamPool` connection.
The client sees nothing until the chosen endpoint has sent its first *body* chunk: until then a
failure (connect error, reset, 5xx, 429, or a pod dying with only headers sent) is retried on the
endpoint the :class:`~mmgate.control.RequestController` picks next (it owns the attempt limit, the
retry budget and the circuit breaker). Once the first chunk has gone to the client, chunks are
relayed as they arrive (no buffering) and an upstream failure is passed on as it came: the client
connection is cut, not patched up. The proxy only moves bytes and returns what happened.
"""

from __future__ import annotations

import ssl
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from urllib.parse import urlsplit

from mmgate.control.controller import Attempt, Flight, RequestController
from mmgate.disagg.orchestrate import (
    OrchestrationSettings,
    Orchestrator,
    PoolTransport,
    StageFailed,
    StageMetrics,
    strip_transfer_fields,
)
from mmgate.disagg.stages import stages_with_spares
from mmgate.gateway.usage import UsageMeter
from mmgate.http.client import (
    UpstreamConnectError,
    UpstreamError,
    UpstreamPool,
    UpstreamResetError,
    UpstreamResponse,
)
from mmgate.http.headers import (
    REQUEST_ID,
    RESPONSE_ENCODE,
    RESPONSE_ENCODE_COST,
    RESPONSE_ENDPOINT,
    RESPONSE_SCORES,
    RESPONSE_TOKENS,
    STAGE_DONE,
    STAGE_HINTS,
    relay_headers,
    upstream_headers,
    with_trace_context,
)
from mmgate.http.request import Request
from mmgate.http.responses import error_response
from mmgate.http.writer import ResponseWriter
from mmgate.request.view import Api
from mmgate.scheduling.types import ENCODERS_HEADER, PREFILLER_HEADER
from mmgate.tls import CA_OPTION

_RETRY_STATUS = frozenset({429, 500, 502, 503, 504})
_LAST_EVENTS = (b"data: [DONE]\n\n", b"data: [DONE]\r\n\r\n")
"""How an OpenAI stream's last event ends (vLLM sends it just before ending the body)."""


@dataclass(slots=True)
class ProxySettings:
    connect_timeout_s: float = 3.0
    read_timeout_s: float = 300.0  # longest silence allowed between upstream bytes (incl. queueing)
    request_timeout_s: float = 600.0
    pool_limit: int = 4096  # idle keep-alive connections kept per endpoint
    ssl_context: ssl.SSLContext | None = None  # for https endpoints (None: system trust store)
    debug_scores: bool = False  # honour ``x-mmgate-debug`` from clients


@dataclass(frozen=True, slots=True)
class Forwarded:
    """How a forwarded request ended: the HTTP status the client got, and ``label`` when the
    metrics status is not an HTTP status (``aborted``: the endpoint broke the stream midway;
    ``client_closed``: the client left)."""

    status: int
    label: str = ""


class _RetryableError(Exception):
    def __init__(self, reason: str, detail: str, *, unreachable: bool = False) -> None:
        super().__init__(detail)
        self.reason = reason
        self.unreachable = unreachable


class Proxy:
    """``orchestration``: run the encode and prefill legs here (gateway-orchestrated
    disaggregation) instead of passing the routing headers on to a sidecar."""

    def __init__(
        self,
        controller: RequestController,
        settings: ProxySettings,
        *,
        clock: Callable[[], float],
        orchestration: OrchestrationSettings | None = None,
        stage_metrics: StageMetrics | None = None,
    ) -> None:
        self.controller = controller
        self.settings = settings
        self.clock = clock
        self.orchestration = orchestration
        self._stage_metrics = stage_metrics
        self._pool: UpstreamPool | None = None
        self._orchestrator: Orchestrator | None = None
        self._origins: dict[str, tuple[str, int, bool]] = {}

    async def start(self) -> None:
        s = self.settings
        self._pool = UpstreamPool(
            connect_timeout_s=s.connect_timeout_s,
            read_timeout_s=s.read_timeout_s,
            max_idle_per_origin=s.pool_limit,
            ssl_context=s.ssl_context,
            untrusted_hint=f"trust a private CA with {CA_OPTION}",
        )
        if self.orchestration is not None:
            transport = PoolTransport(self._pool)
            self._orchestrator = Orchestrator(transport, self.orchestration, metrics=self._stage_metrics)

    async def stop(self) -> None:
        self._orchestrator = None
        if self._pool is not None:
            await self._pool.close()
            self._pool = None

    def _origin(self, url: str) -> tuple[str, int, bool]:
        """``(host, port, tls)`` of an endpoint URL, parsed once per endpoint."""
        origin = self._origins.get(url)
        if origin is None:
            parts = urlsplit(url)
            if parts.scheme not in ("http", "https"):
                raise _RetryableError("connect", f"{parts.scheme} endpoints are not supported by the proxy")
            tls = parts.scheme == "https"
            origin = self._origins[url] = (parts.hostname or "", parts.port or (443 if tls else 80), tls)
        return origin

    def wants_scores(self, request: Request) -> bool:
        """Debug scores are returned only when the config allows it and the client asks."""
        return self.settings.debug_scores and "x-mmgate-debug" in request.headers

    async def forward(self, request: Request, writer: ResponseWriter, flight: Flight) -> Forwarded:
        """Send ``request`` (already parsed and admitted as ``flight``) to the endpoints the
        controller picks, answering on ``writer``."""
        assert self._pool is not None, "start() first"
        controller = self.controller
        headers = upstream_headers(request.headers.raw, flight.request_id)
        attempt = controller.decide(flight)
        while attempt is not None:
            controller.started(attempt)
            try:
                return await self._attempt(request, writer, headers, attempt)
            except _RetryableError as exc:
                attempt = controller.retry(attempt, exc.reason, str(exc), unreachable=exc.unreachable)
        writer.send(
            error_response(
                502,
                f"no endpoint answered after {flight.attempts} attempt(s): {flight.last_error}",
                code="upstream_unavailable",
                headers={REQUEST_ID: flight.request_id},
            )
        )
        return Forwarded(502)

    async def _attempt(
        self, request: Request, writer: ResponseWriter, headers: list[tuple[str, str]], attempt: Attempt
    ) -> Forwarded:
        """One attempt: raises :class:`_RetryableError` when it failed before the first byte."""
        pool = self._pool
        assert pool is not None
        routing = attempt.headers
        if attempt.propagation:  # tracing on: this attempt's traceparent, on every leg
            headers = with_trace_context(headers, attempt.propagation)
        send_headers = [*headers, *routing.items()] if routing else headers
        body = attempt.flight.view.body  # the client's bytes, or their pieces around media uuids
        interim = None
        sidecar_legs = routing and (ENCODERS_HEADER in routing or PREFILLER_HEADER in routing)
        if sidecar_legs and self._orchestrator is None:
            # A routing sidecar runs the legs: ask it to say when each stage pod is done.
            send_headers.append((STAGE_HINTS, "103"))
            interim = partial(self._stage_hints, attempt)
        orchestrated = False
        ok = False
        try:
            if self._orchestrator is not None:
                send_headers = headers  # the stages run here: no sidecar reads the headers
                view = attempt.flight.view
                records = self.controller.endpoints.records()
                stages = stages_with_spares(routing, records) if routing and view.api is Api.CHAT else None
                if stages is not None and stages.any:
                    try:
                        prepared = await self._orchestrator.prepare(
                            body, view, stages, headers, attempt.flight.request_id,
                            released=partial(self.controller.stage_done, attempt),
                        )  # fmt: skip
                    except StageFailed as exc:
                        rid = {REQUEST_ID: attempt.flight.request_id}
                        writer.send(error_response(503, str(exc), code="stage_unavailable", headers=rid))
                        return Forwarded(503)
                    body = prepared.body
                    orchestrated = True
            host, port, tls = self._origin(attempt.record.endpoint.url)
            try:
                upstream = await pool.request(
                    host, port, request.method, request.target, send_headers, body, tls=tls,
                    on_interim=interim,
                )  # fmt: skip
            except (UpstreamConnectError, UpstreamResetError) as exc:
                raise _RetryableError("connect", f"{type(exc).__name__}: {exc}", unreachable=True) from None
            except TimeoutError:
                raise _RetryableError("timeout", "no response headers in time") from None
            except OSError as exc:
                raise _RetryableError("connect", f"{type(exc).__name__}: {exc}") from None
            try:
                if upstream.status in _RETRY_STATUS and not attempt.is_last:
                    raise _RetryableError(str(upstream.status), f"HTTP {upstream.status}")
                try:
                    first = await upstream.read()
                except TimeoutError:
                    raise _RetryableError("timeout", "no first byte in time") from None
                except OSError as exc:
                    raise _RetryableError("reset", f"failed before the first byte: {exc}") from None
                self.controller.first_byte(attempt, upstream.status)
                whole = orchestrated and not attempt.flight.view.stream
                result = await self._relay(request, writer, upstream, first, attempt, whole=whole)
                ok = not result.label
                return result
            finally:
                if ok:
                    upstream.release()
                else:
                    upstream.close()  # mid-stream or client gone: the endpoint aborts the request
        finally:
            self.controller.finished(attempt, ok=ok, sent=writer.body_bytes)

    def _stage_hints(self, attempt: Attempt, status: int, headers: list[tuple[str, str]]) -> None:
        """A routing sidecar's ``103``: the stage pods it names are done with the request. Only
        pods the attempt holds as its stages are released (a name it does not hold changes
        nothing), so a wrong or hostile hint cannot release another request's load."""
        if status != 103:
            return
        for name, value in headers:
            if name.lower() == STAGE_DONE:
                for host in value.split(","):
                    if host := host.strip():
                        self.controller.stage_done(attempt, host)

    async def _relay(
        self,
        request: Request,
        writer: ResponseWriter,
        upstream: UpstreamResponse,
        first: bytes,
        attempt: Attempt,
        *,
        whole: bool = False,
    ) -> Forwarded:
        """Commit to this upstream: the head leaves with the first chunk, then every chunk as it
        arrives (waiting while the client is slower than the endpoint). ``whole``: a disaggregated
        request's JSON answer, read to its end and sent without transfer parameters."""
        flight = attempt.flight
        decision = attempt.decision
        headers, length = relay_headers(upstream.headers)
        headers.append((RESPONSE_ENDPOINT, decision.endpoint))
        headers.append((RESPONSE_TOKENS, str(decision.request_tokens)))
        headers.append((REQUEST_ID, flight.request_id))
        if flight.debug:
            if decision.scores is not None:
                headers.append((RESPONSE_SCORES, _scores_header(decision.scores)))
            if decision.encode is not None:
                headers.append((RESPONSE_ENCODE, f"{decision.encode[0]}; reason={decision.encode[1]}"))
            if decision.encode_costs is not None:
                local, tier = decision.encode_costs
                headers.append((RESPONSE_ENCODE_COST, f"local={local:.6f}; tier={tier:.6f}"))
        deadline = flight.received + self.settings.request_timeout_s
        held = first  # read from the upstream, not yet written to the client
        # Flow control charged an estimate of the output: the answer says what it was.
        meter = UsageMeter.of(flight.view) if flight.output_estimate else None
        if meter is not None:
            meter.feed(first)
        try:
            if whole:
                try:
                    while chunk := await upstream.read():
                        held += chunk
                        if meter is not None:
                            meter.feed(chunk)
                except (UpstreamError, TimeoutError) as exc:
                    self.controller.broke(attempt, f"{type(exc).__name__}: {exc}")
                    writer.send(
                        error_response(502, "the decode pod broke its answer", code="upstream_broken")
                    )
                    return Forwarded(upstream.status, "aborted")
                held = strip_transfer_fields(held)
                length = len(held)
            writer.start(upstream.status, headers, content_length=length)
            while True:
                # The last piece waits for the upstream's end and leaves with the client's end of
                # the body: at once when the end came with it, else (an SSE stream's closing
                # event, a moment before the upstream's terminator) when the end arrives.
                if not upstream.ended and not held.endswith(_LAST_EVENTS):
                    await writer.write(held)
                    held = b""
                try:
                    if self.clock() > deadline:
                        raise TimeoutError(
                            f"the request took longer than {self.settings.request_timeout_s:g} s"
                        )
                    chunk = await upstream.read()
                except (UpstreamError, TimeoutError) as exc:
                    self.controller.broke(attempt, f"{type(exc).__name__}: {exc}")
                    writer.abort()  # the client must see a broken stream, not an end
                    return Forwarded(upstream.status, "aborted")
                if not chunk:
                    break
                if meter is not None:
                    meter.feed(chunk)
                held = held + chunk if held else chunk
            writer.end(held)
        except ConnectionError:
            # closing the upstream connection cancels the work there
            return Forwarded(upstream.status, "client_closed")
        finally:
            if meter is not None and (usage := meter.usage()) is not None:
                self.controller.usage(attempt, usage)  # what was generated, also when cut short
        return Forwarded(upstream.status)


def _scores_header(scores: dict[str, dict[str, float]]) -> str:
    """``endpoint: scorer=0.50,scorer=1.00; endpoint: ...`` — ASCII, one line, bounded."""
    parts = []
    for endpoint, by_scorer in scores.items():
        inner = ",".join(f"{name}={value:.3f}" for name, value in by_scorer.items())
        parts.append(f"{endpoint}: {inner}")
    return "; ".join(parts)[:4096]
