"""Forwarding one request: pick, send the original bytes, stream the answer back, retry early.

The body is sent as the very ``bytes`` object the client sent (no re-serialisation, no copy), over
a keep-alive :class:`~mmgate.gateway.h1.client.UpstreamPool` connection.
The client sees nothing until the chosen endpoint has sent its first *body* chunk: until then a
failure (connect error, reset, 5xx, 429, or a pod dying with only headers sent) is retried on the
next-best endpoint, within ``max_attempts`` per request and the fleet-wide :class:`RetryBudget`.
Once the first chunk has gone to the client, chunks are relayed as they arrive (no buffering)
and an upstream failure is passed on as it came: the client connection is cut, not patched up.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from prometheus_client import Counter, Gauge

from mmgate.datalayer.endpoints import EndpointRecord
from mmgate.datalayer.layer import DataLayer
from mmgate.gateway.breaker import Breaker, BreakerSettings, State
from mmgate.gateway.budget import RetryBudget
from mmgate.gateway.h1.client import (
    UpstreamConnectError,
    UpstreamError,
    UpstreamPool,
    UpstreamResetError,
    UpstreamResponse,
)
from mmgate.gateway.h1.request import Request
from mmgate.gateway.h1.writer import ResponseWriter
from mmgate.gateway.headers import (
    REQUEST_ID,
    RESPONSE_ENDPOINT,
    RESPONSE_SCORES,
    RESPONSE_TOKENS,
    relay_headers,
    upstream_headers,
)
from mmgate.gateway.responses import error_response
from mmgate.gateway.routing import Decision, NoEndpoint, Router
from mmgate.gateway.telemetry import Telemetry
from mmgate.request.view import RequestView

log = logging.getLogger("mmgate.gateway")

_RETRY_STATUS = frozenset({429, 500, 502, 503, 504})
_LAST_EVENTS = (b"data: [DONE]\n\n", b"data: [DONE]\r\n\r\n")
"""How an OpenAI stream's last event ends (vLLM sends it just before ending the body)."""


@dataclass(slots=True)
class ProxySettings:
    max_attempts: int = 3  # the first try plus up to two retries
    connect_timeout_s: float = 3.0
    read_timeout_s: float = 300.0  # longest silence allowed between upstream bytes (incl. queueing)
    request_timeout_s: float = 600.0
    pool_limit: int = 4096  # idle keep-alive connections kept per endpoint
    ssl_context: ssl.SSLContext | None = None  # for https endpoints (None: system trust store)
    retry_ratio: float = 0.2
    retry_min_per_s: float = 10.0
    debug_scores: bool = False  # honour ``x-mmgate-debug`` from clients
    breaker: BreakerSettings = field(default_factory=BreakerSettings)


@dataclass(slots=True)
class Outcome:
    """What happened to one request, for the request log and the metrics."""

    status: int = 0
    endpoint: str = ""
    attempts: int = 0
    decision: Decision | None = None
    decision_s: float = 0.0
    first_byte_s: float | None = None
    errors: list[str] = field(default_factory=list)
    label: str = ""  # metrics status label when it is not an HTTP status (aborted, client_closed)


class _RetryableError(Exception):
    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason


class Proxy:
    def __init__(
        self,
        data: DataLayer,
        router: Router,
        telemetry: Telemetry,
        settings: ProxySettings,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.data = data
        self.router = router
        self.telemetry = telemetry
        self.settings = settings
        self.clock = clock
        self.budget = RetryBudget(ratio=settings.retry_ratio, min_per_s=settings.retry_min_per_s)
        ejections = Counter(
            "mmgate_endpoint_ejections_total",
            "Times an endpoint was ejected by the circuit breaker (outlier detection)",
            ["endpoint"],
            registry=telemetry.registry,
        )
        circuit = Gauge(
            "mmgate_endpoint_circuit_open",
            "1 while the endpoint's circuit breaker keeps it out of rotation (open or half-open)",
            ["endpoint"],
            registry=telemetry.registry,
        )

        def on_change(name: str, state: State) -> None:
            circuit.labels(name).set(0 if state is State.CLOSED else 1)
            if state is State.OPEN:
                ejections.labels(name).inc()
                log.warning("endpoint %s ejected by the circuit breaker", name)
            elif state is State.CLOSED:
                log.info("endpoint %s back in rotation (half-open probe succeeded)", name)

        self.breaker = Breaker(settings.breaker, clock=clock, on_change=on_change)
        self._pool: UpstreamPool | None = None
        self._origins: dict[str, tuple[str, int, bool]] = {}

    async def start(self) -> None:
        s = self.settings
        self._pool = UpstreamPool(
            connect_timeout_s=s.connect_timeout_s,
            read_timeout_s=s.read_timeout_s,
            max_idle_per_origin=s.pool_limit,
            ssl_context=s.ssl_context,
        )

    async def stop(self) -> None:
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

    def _decide(
        self,
        request: Request,
        view: RequestView,
        candidates: Sequence[EndpointRecord],
        request_id: str,
        debug: bool,
        out: Outcome,
    ) -> Decision:
        started = time.perf_counter()
        decision = self.router.decide(
            view, candidates, self.clock(), request_id=request_id, headers=request.headers, debug=debug
        )
        elapsed = time.perf_counter() - started
        out.decision_s += elapsed
        self.telemetry.record_decision(decision, elapsed, first_attempt=out.attempts == 0)
        return decision

    async def forward(
        self,
        request: Request,
        writer: ResponseWriter,
        view: RequestView,
        candidates: list[EndpointRecord],
        request_id: str,
        received: float,
        out: Outcome,
    ) -> None:
        """Proxy ``request`` (its body already parsed into ``view``) to one of ``candidates``,
        answering on ``writer``."""
        assert self._pool is not None, "start() first"
        self.budget.on_request()
        headers = upstream_headers(request.headers.raw, request_id)
        want_scores = self.settings.debug_scores and "x-mmgate-debug" in request.headers
        pending = self.breaker.filter(candidates)
        last_error = "no endpoint could be reached"
        while pending:
            try:
                decision = self._decide(request, view, pending, request_id, want_scores, out)
            except NoEndpoint as exc:
                last_error = str(exc) or "no endpoint passed the scheduler's filters"
                break
            out.decision = decision
            out.endpoint = decision.endpoint
            out.attempts += 1
            pending = [r for r in pending if r.name != decision.endpoint]
            record = self.data.registry.get(decision.endpoint)
            if record is None:  # removed between the decision and now
                continue
            is_last = out.attempts >= self.settings.max_attempts or not pending
            try:
                await self._attempt(
                    request,
                    writer,
                    record,
                    decision,
                    headers,
                    is_last,
                    want_scores,
                    received,
                    request_id,
                    out,
                )
                return
            except _RetryableError as exc:
                out.errors.append(f"{decision.endpoint}: {exc}")
                if exc.reason != "429":  # shedding load is not sickness
                    self.breaker.failure(decision.endpoint)
                last_error = str(exc)
                self.telemetry.upstream_errors.labels(decision.endpoint, exc.reason).inc()
                if is_last or not self.budget.try_retry():
                    break
                self.telemetry.retries.labels(exc.reason).inc()
        out.status = 502
        writer.send(
            error_response(
                502,
                f"no endpoint answered after {out.attempts} attempt(s): {last_error}",
                code="upstream_unavailable",
                headers={REQUEST_ID: request_id},
            )
        )

    async def _attempt(
        self,
        request: Request,
        writer: ResponseWriter,
        record: EndpointRecord,
        decision: Decision,
        headers: list[tuple[str, str]],
        is_last: bool,
        want_scores: bool,
        received: float,
        request_id: str,
        out: Outcome,
    ) -> None:
        pool = self._pool
        assert pool is not None
        send_headers = [*headers, *decision.headers.items()] if decision.headers else headers
        host, port, tls = self._origin(record.endpoint.url)
        self.router.started(decision)
        self.breaker.begin(record.name)
        if decision.pre_request is not None:
            asyncio.get_running_loop().call_soon(_run_hook, decision.pre_request)
        ok = False
        try:
            try:
                upstream = await pool.request(
                    host, port, request.method, request.target, send_headers, request.body, tls=tls
                )
            except (UpstreamConnectError, UpstreamResetError) as exc:
                record.health.record_failure(self.clock(), f"connect: {exc}")
                raise _RetryableError("connect", f"{type(exc).__name__}: {exc}") from None
            except TimeoutError:
                raise _RetryableError("timeout", "no response headers in time") from None
            except OSError as exc:
                raise _RetryableError("connect", f"{type(exc).__name__}: {exc}") from None
            try:
                if upstream.status in _RETRY_STATUS and not is_last:
                    raise _RetryableError(str(upstream.status), f"HTTP {upstream.status}")
                try:
                    first = await upstream.read()
                except TimeoutError:
                    raise _RetryableError("timeout", "no first byte in time") from None
                except OSError as exc:
                    raise _RetryableError("reset", f"failed before the first byte: {exc}") from None
                record.health.record_success(self.clock())
                if upstream.status >= 500:  # the last attempt's error, passed through
                    self.breaker.failure(record.name)
                else:
                    self.breaker.success(record.name)
                out.first_byte_s = self.clock() - received
                self.router.first_token(decision)
                ok = await self._relay(
                    writer, upstream, first, decision, want_scores, request_id, received, out
                )
                if out.label == "aborted":  # the endpoint broke the stream midway
                    self.breaker.failure(record.name)
            finally:
                if ok:
                    upstream.release()
                else:
                    upstream.close()  # mid-stream or client gone: the endpoint aborts the request
        finally:
            self.breaker.release(record.name)
            self.router.finished(decision, ok=ok)

    async def _relay(
        self,
        writer: ResponseWriter,
        upstream: UpstreamResponse,
        first: bytes,
        decision: Decision,
        want_scores: bool,
        request_id: str,
        received: float,
        out: Outcome,
    ) -> bool:
        """Commit to this upstream: the head leaves with the first chunk, then every chunk as it
        arrives (waiting while the client is slower than the endpoint). Returns whether the
        stream completed."""
        headers, length = relay_headers(upstream.headers)
        headers.append((RESPONSE_ENDPOINT, decision.endpoint))
        headers.append((RESPONSE_TOKENS, str(decision.request_tokens)))
        headers.append((REQUEST_ID, request_id))
        if want_scores and decision.scores is not None:
            headers.append((RESPONSE_SCORES, _scores_header(decision.scores)))
        out.status = upstream.status
        deadline = received + self.settings.request_timeout_s
        held = first  # read from the upstream, not yet written to the client
        try:
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
                    out.label = "aborted"
                    out.errors.append(f"{decision.endpoint}: stream broke: {type(exc).__name__}: {exc}")
                    writer.abort()  # the client must see a broken stream, not an end
                    return False
                if not chunk:
                    break
                held = held + chunk if held else chunk
            writer.end(held)
        except ConnectionError:
            out.label = "client_closed"  # closing the upstream connection cancels the work there
            return False
        return True


def _run_hook(hook: Callable[[], None]) -> None:
    try:
        hook()
    except Exception:
        log.exception("PreRequest hook failed")


def _scores_header(scores: dict[str, dict[str, float]]) -> str:
    """``endpoint: scorer=0.50,scorer=1.00; endpoint: ...`` — ASCII, one line, bounded."""
    parts = []
    for endpoint, by_scorer in scores.items():
        inner = ",".join(f"{name}={value:.3f}" for name, value in by_scorer.items())
        parts.append(f"{endpoint}: {inner}")
    return "; ".join(parts)[:4096]
