"""The request controller: everything between a transport receiving a request and moving bytes.

One object owns the order of the steps around a scheduling decision, so every transport (the
HTTP gateway, the discrete-event benchmark, and next an Envoy ext_proc server and an E/PD
sidecar) behaves the same and only moves bytes::

    trace   = controller.trace(headers, api)                   # None unless tracing is on
    who     = controller.authenticate(headers)                 # with auth on; RequestError -> 401
    view    = controller.parse(body, headers, api, trace)      # once; RequestError -> 4xx
    flight  = controller.open(view, request_id, headers, identity=who, trace=trace)  # NoCandidates -> 503
    await controller.admit(flight)                             # admission; Overloaded -> 429;
                                                               # then URL media sized (opt in);
                                                               # then flow control (held while
                                                               # the pool is saturated; 429/503)
    attempt = controller.decide(flight)                        # None: nothing left to try
    while attempt is not None:
        controller.started(attempt)                            # load on every stage's pod, hooks
        ... run the encode / prefill legs, if this transport does (gateway mode), calling
            controller.stage_done(attempt, pod) as each stage pod's legs end ...
        ... send attempt.headers (and attempt.propagation) to attempt.endpoint ...
        on a failure before the first byte:
            controller.finished(attempt, ok=False)
            attempt = controller.retry(attempt, reason, detail)  # next best, failed ones excluded
            continue
        controller.first_byte(attempt, status)
        ... relay; controller.usage(attempt, ...) when the transport sees usage ...
        controller.finished(attempt, ok=completed, sent=body_bytes)
    controller.leave(flight)
    ... trace.end(status) when the client has its answer ...

Candidates are narrowed in one place (:meth:`_serving` at open, then :meth:`decide`): healthy
endpoints that serve the model,
within the transport's subset hint (Envoy's ``x-gateway-destination-endpoint-subset``), without
endpoints the circuit breaker ejected, without those already tried. The clock and the deferral
of off-path hook work are given by the caller: wall time and the event loop behind HTTP (the
gateway calls :meth:`RequestController.defer_on` when it starts: PreRequest index updates then run
on the loop's next turn, after the request was written), virtual time and an immediate call in the
discrete-event benchmark; without either, hooks run inline. The scheduler behind the picker stays
pure.

Tracing is one more seam (:class:`RequestTracer`): with a tracer, each step reports to the
request's :class:`RequestTrace` (``mmgate.gateway.tracing`` makes OpenTelemetry spans of them);
without one, :meth:`RequestController.trace` returns ``None`` and no step does tracing work.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import msgspec

from mmgate.control.admission import Admission, AdmissionSettings, Overloaded
from mmgate.control.apikeys import Identity, KeyStore
from mmgate.control.circuit_breaker import Breaker, BreakerSettings, State
from mmgate.control.decision import Decision, EndpointPicker, NoEndpoint
from mmgate.control.flow.classify import FlowKey
from mmgate.control.flow.dispatcher import BYTES_FULL, EVICTED, QUEUE_FULL, SHED, STATUS, TTL
from mmgate.control.flow.gate import FlowGate
from mmgate.control.flow.queues import HeldRequest
from mmgate.control.parser import Parser
from mmgate.control.retry_budget import RetryBudget
from mmgate.datalayer.endpoints import EndpointRecord, EndpointRegistry
from mmgate.errors import RequestError, did_you_mean
from mmgate.request.urlsizing import UrlSizer
from mmgate.request.view import Api, RequestView

log = logging.getLogger("mmgate.control")

# Why a held request is turned away: flow control's 429/503, or the client's own mistake found
# when the request was decided on its release.
Refusal = Overloaded | RequestError

Deferral = Callable[[Callable[[], None]], None]


@dataclass(slots=True)
class ControlSettings:
    """Per-request policy shared by every transport."""

    max_attempts: int = 3  # the first try plus up to two retries
    retry_ratio: float = 0.2
    retry_min_per_s: float = 10.0
    breaker: BreakerSettings = field(default_factory=BreakerSettings)
    max_inflight: int = 0  # requests admitted at once; beyond it a 429 (0 = no limit)
    admission: AdmissionSettings = field(default_factory=AdmissionSettings)  # queue, per-client


class ControlObserver(Protocol):
    """What the controller reports as it goes (the gateway's Prometheus metrics implement it)."""

    def record_parse(self, seconds: float) -> None: ...
    def record_decision(self, decision: Decision, seconds: float, *, first_attempt: bool) -> None: ...
    def attempt_failed(self, endpoint: str, reason: str) -> None: ...
    def retried(self, reason: str) -> None: ...
    def circuit_changed(self, endpoint: str, state: State) -> None: ...
    def ttft_observed(self, endpoint: str, predicted_s: float, observed_s: float) -> None: ...


class RequestTrace(Protocol):
    """One request's trace: the controller reports each step as it ends. Attributes come from
    the view and the decision only (never bodies, media payloads or headers)."""

    def parsed(self, view: RequestView | None, seconds: float, error: RequestError | None) -> None: ...
    def decided(self, decision: Decision, seconds: float, candidates: int) -> None: ...
    def undecided(self, reason: str) -> None: ...
    def sending(self, endpoint: str, attempt: int) -> list[tuple[str, str]]:
        """An attempt starts: the headers that carry the trace upstream (W3C ``traceparent``)."""
        ...

    def first_byte(self, status: int) -> None: ...
    def broke(self, detail: str) -> None: ...
    def attempt_done(self, ok: bool, sent: int) -> None: ...
    def failed(self, endpoint: str, reason: str, detail: str) -> None:
        """The attempt on ``endpoint`` failed before its first byte (reported after
        :meth:`attempt_done`)."""
        ...

    def end(self, status: str) -> None:
        """The client has its answer (``status``: the HTTP status or a label such as
        ``client_closed``)."""
        ...


class RequestTracer(Protocol):
    """Starts a :class:`RequestTrace` for each request, continuing the client's trace when its
    headers carry one."""

    def begin(self, headers: Mapping[str, str], api: Api, path: str) -> RequestTrace: ...


class NoCandidates(Exception):
    """No endpoint can take the request at all (none configured, none healthy): a 503."""


@dataclass(slots=True, eq=False)
class Usage:
    """Tokens an attempt reported (OpenAI ``usage``), when the transport sees them."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0


class Flight(msgspec.Struct, eq=False):
    """One request as the controller follows it. Transports read it (request logs, metrics);
    only the controller writes it. A msgspec struct: its fields are filled in C, one call per
    request instead of a Python ``__init__`` storing each."""

    view: RequestView
    request_id: str
    headers: Mapping[str, str]
    candidates: list[EndpointRecord]
    received: float
    client: str
    debug: bool
    identity: Identity | None = None  # the verified API key (authentication on), else None
    trace: RequestTrace | None = None  # tracing on: the request's trace, else None
    attempts: int = 0
    decision: Decision | None = None  # the latest attempt's
    decision_s: float = 0.0  # time spent deciding, over every attempt
    first_byte_s: float | None = None  # from received to the first upstream byte
    last_error: str = "no endpoint could be reached"
    tried: set[str] | None = None  # endpoints decided on so far (made at the first decision)
    _errors: list[str] | None = None  # made at the first failed attempt: most have none
    _admitted: bool = False
    held_s: float = 0.0  # time flow control held the request before it was released
    flow: FlowKey | None = None  # flow control on: the request's flow
    # Output tokens flow control charged its flow before they were seen (0: none). A transport
    # that sees the answer reports its usage (RequestController.usage) when this is not 0.
    output_estimate: int = 0
    _prompt_tokens: int = 0  # priced by flow control (when its band or detector needs them; -1: not yet)
    _media_tokens: int = 0  # of them, media (when flow control priced them on the fast path)
    # (candidates, the unsaturated ones among them) as admit_now found them, for decide
    _free: tuple[list[EndpointRecord], list[EndpointRecord]] | None = None
    _early: bool = False  # flow control decided its first attempt when releasing it
    _ready: Attempt | None = None  # that attempt (None: no endpoint could take it)

    @property
    def errors(self) -> Sequence[str]:
        """What went wrong on each failed attempt, in order (empty when none failed)."""
        return self._errors if self._errors is not None else ()

    def _failed(self, error: str) -> None:
        if self._errors is None:
            self._errors = [error]
        else:
            self._errors.append(error)

    @property
    def tenant(self) -> str | None:
        """The verified key's tenant (``None`` with authentication off)."""
        return self.identity.tenant if self.identity is not None else None

    @property
    def endpoint(self) -> str:
        """The latest attempt's endpoint ("" before any decision)."""
        return self.decision.endpoint if self.decision is not None else ""


class Attempt(msgspec.Struct, eq=False):
    """One try of a flight on one endpoint: the decision and whether a retry may follow."""

    flight: Flight
    decision: Decision
    record: EndpointRecord
    is_last: bool  # no retry after this one: its error answer goes to the client
    # Tracing on: the trace headers this attempt carries upstream (set when it starts), in place
    # of the client's; else empty and the client's pass through.
    propagation: Sequence[tuple[str, str]] = ()
    sent_at: float | None = None  # when started() was called (the clock's time)
    # Flow control on: the prompt tokens counted on the endpoint until its first byte (0 after
    # it, while the request still counts there until finished); -1: not placed.
    placed: int = -1

    @property
    def endpoint(self) -> str:
        return self.decision.endpoint

    @property
    def headers(self) -> dict[str, str]:
        """Routing headers the upstream request must carry."""
        return self.decision.headers


class RequestController:
    def __init__(
        self,
        picker: EndpointPicker,
        endpoints: EndpointRegistry,
        settings: ControlSettings | None = None,
        *,
        parse: Parser | None = None,
        clock: Callable[[], float] = time.monotonic,
        observer: ControlObserver | None = None,
        defer: Deferral | None = None,
        keys: KeyStore | None = None,
        sizer: UrlSizer | None = None,
        tracer: RequestTracer | None = None,
        flow: FlowGate | None = None,
    ) -> None:
        self.picker = picker
        self.flow = flow  # flow control (featureGates: [flowControl]), else None
        self._timer: asyncio.TimerHandle | None = None  # the next held request's TTL
        self._timer_due = 0.0  # when it is due, on the controller's clock
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tracer = tracer  # tracing on, else None
        self.keys = keys  # API keys (authentication on), else None
        self._sizer = sizer  # URL media sizing (mmgate.urlProbe), else None
        self.endpoints = endpoints
        self.settings = settings if settings is not None else ControlSettings()
        self.clock = clock
        self._parse = parse
        self._observer = observer
        self._defer: Deferral = defer if defer is not None else run_hook
        s = self.settings
        self._budget = RetryBudget(ratio=s.retry_ratio, min_per_s=s.retry_min_per_s, clock=clock)
        on_change = observer.circuit_changed if observer is not None else None
        self._breaker = Breaker(s.breaker, clock=clock, on_change=on_change)
        self._admission = Admission(s.admission, clock=clock)
        endpoints.on_remove(lambda endpoint: self.forget(endpoint.name))

    def defer_on(self, loop: asyncio.AbstractEventLoop) -> None:
        """Run deferred PreRequest work (index updates) on ``loop``'s next turn, after the
        request was sent, instead of inline before it."""
        call_soon = loop.call_soon
        self._loop = loop

        def later(hook: Callable[[], None]) -> None:
            call_soon(run_hook, hook)

        self._defer = later

    # -- read-only views ---------------------------------------------------------------------

    @property
    def inflight(self) -> int:
        """Requests holding an admission slot now."""
        return self._admission.inflight

    def circuit(self, endpoint: str) -> State:
        """The circuit breaker's state for ``endpoint``."""
        return self._breaker.state(endpoint)

    @property
    def tracing(self) -> bool:
        """Whether requests are traced (fixed when the controller is built: a transport may
        read it once and call :meth:`trace` only when it is on)."""
        return self._tracer is not None

    @property
    def reads_client(self) -> bool:
        """Whether :meth:`open` reads its ``client`` argument: only a per-client admission limit
        without authentication does (with it the verified tenant is the client). Fixed when the
        controller is built: a transport may skip working the client's key out otherwise."""
        return self.keys is None and self._admission.counts_clients

    # -- the request ---------------------------------------------------------------------------

    def authenticate(self, headers: Mapping[str, str]) -> Identity | None:
        """The caller's verified key when authentication is on (``None`` when off). Raises a 401
        :class:`RequestError` for a missing or unknown key. Transports call it before parsing so
        an unauthenticated body costs nothing; :meth:`open` calls it when they did not."""
        return self.keys.verify(headers) if self.keys is not None else None

    def trace(self, headers: Mapping[str, str], api: Api, path: str = "") -> RequestTrace | None:
        """A new request's trace when tracing is on (a child of the client's ``traceparent``, if
        any), else ``None``. Transports call it first, so the trace covers every step."""
        return self._tracer.begin(headers, api, path) if self._tracer is not None else None

    def parse(
        self, body: bytes, headers: Mapping[str, str], api: Api, trace: RequestTrace | None = None
    ) -> RequestView:
        """The body decoded once (raises :class:`RequestError` for a client mistake). Its time
        goes to the observer (``mmgate_parse_seconds``), refusals included: they cost it too."""
        if self._parse is None:
            raise RuntimeError("this controller was built without a parser")
        started = time.perf_counter()
        try:
            view = self._parse(body, headers, api)
        except RequestError as exc:
            seconds = time.perf_counter() - started
            if self._observer is not None:
                self._observer.record_parse(seconds)
            if trace is not None:
                trace.parsed(None, seconds, exc)
            raise
        seconds = time.perf_counter() - started
        if self._observer is not None:
            self._observer.record_parse(seconds)
        if trace is not None:
            trace.parsed(view, seconds, None)
        return view

    def open(
        self,
        view: RequestView,
        request_id: str,
        headers: Mapping[str, str],
        *,
        client: str = "",
        debug: bool = False,
        received: float | None = None,
        subset: Collection[str] | None = None,
        identity: Identity | None = None,
        trace: RequestTrace | None = None,
    ) -> Flight:
        """Start following a request: its candidates now. Raises :class:`RequestError` (401
        without a valid key when authentication is on, 404 when the model is served nowhere),
        :class:`NoCandidates` when no endpoint can take it. With authentication on, admission
        tells clients apart by their verified tenant instead of ``client``."""
        if self.keys is not None:
            if identity is None:
                identity = self.keys.verify(headers)
            client = "tenant:" + identity.tenant
        now = self.clock() if received is None else received
        candidates = self._serving(view.model, subset)
        if not candidates:
            reason = "no endpoints are configured" if not len(self.endpoints) else "no healthy endpoint"
            raise NoCandidates(f"{reason} for model '{view.model}'; try again shortly")
        return Flight(view, request_id, headers, candidates, now, client, debug, identity, trace)

    async def admit(self, flight: Flight) -> None:
        """Take an admission slot (may wait in the queue). Raises ``Overloaded`` (a 429). Then,
        with URL sizing on, the request's unprobed URL media are sized (bounded by the probe's
        timeout): after admission, so a shed request fetches nothing."""
        await self._admission.enter(self.settings.max_inflight, flight.client, flight.identity)
        flight._admitted = True
        self._budget.on_request()
        if self._sizer is not None and flight.view.unprobed_assets:
            await self._sizer.size(flight.view)
        if self.flow is not None:
            try:
                await self._held(flight)
            except BaseException:
                self.leave(flight)
                raise

    def admit_now(self, flight: Flight) -> bool:
        """:meth:`admit` without awaiting, when nothing can make it wait: a free slot, no
        verified key (whose own limits :meth:`admit` checks), no URL media to size. True: the
        request is admitted; False: nothing happened, ``await admit(flight)``. Raises
        ``Overloaded`` as :meth:`admit` does. Two coroutines less on every request."""
        if flight.identity is not None or (self._sizer is not None and flight.view.unprobed_assets):
            return False
        flow = self.flow
        if flow is not None:
            if flow.dispatcher.count:
                return False  # requests are held: admit() queues it behind or beside them
            free = self._unsaturated(flight.candidates)
            if not free:
                return False  # every endpoint is saturated: admit() holds it
            flight._free = (flight.candidates, free)  # decide() narrows to these without asking again
        if not self._admission.enter_now(self.settings.max_inflight, flight.client):
            flight._free = None  # admit() may wait for a slot: by then the room may be gone
            return False
        flight._admitted = True
        self._budget.on_request()
        if flow is not None:  # nothing held and room: released at once
            try:
                self.hold(flight, _nothing, _raise)
            except (Overloaded, RequestError):  # refused, or priced beyond any model (a 400)
                self.leave(flight)
                raise
        return True

    def leave(self, flight: Flight) -> None:
        """The request is over: its admission slot goes to the next one."""
        if flight._admitted:
            flight._admitted = False
            self._admission.leave(flight.client, flight.identity)

    def decide(self, flight: Flight) -> Attempt | None:
        """The next attempt over the candidates not tried yet; ``None`` when nothing is left
        (``flight.last_error`` says why). Under flow control the first attempt was decided when
        the request was released (late binding): that one is returned."""
        if flight._early:
            flight._early = False
            ready, flight._ready = flight._ready, None  # no flight <-> attempt cycle left for the GC
            return ready
        return self._decide(flight)

    def _decide(self, flight: Flight) -> Attempt | None:
        while True:
            # The one place candidates narrow: the flight's healthy, model-serving ones (open),
            # minus the ones tried; before the first attempt, minus the breaker's ejections (all
            # of them if it ejected all).
            tried = flight.tried
            if tried is None:
                pending = flight.candidates = self._breaker.filter(flight.candidates)
                if self.flow is not None:  # flow control on: to an endpoint with room, if any
                    known = flight._free
                    if known is not None and known[0] is pending:  # admit_now found these just now
                        pending = known[1]
                    else:
                        pending = self._unsaturated(pending) or pending
                    flight._free = None
            else:
                pending = [r for r in flight.candidates if r.name not in tried]
            if not pending:
                return None
            started = time.perf_counter()
            try:
                decision = self.picker.decide(
                    flight.view,
                    pending,
                    self.clock(),
                    request_id=flight.request_id,
                    headers=flight.headers,
                    debug=flight.debug,
                    tenant=identity.tenant if (identity := flight.identity) is not None else None,
                )
            except NoEndpoint as exc:
                flight.last_error = str(exc) or "no endpoint passed the scheduler's filters"
                if flight.trace is not None:
                    flight.trace.undecided(flight.last_error)
                return None
            elapsed = time.perf_counter() - started
            flight.decision_s += elapsed
            if self._observer is not None:
                self._observer.record_decision(decision, elapsed, first_attempt=flight.attempts == 0)
            if flight.trace is not None:
                flight.trace.decided(decision, elapsed, len(pending))
            flight.decision = decision
            flight.attempts += 1
            if flight.tried is None:
                flight.tried = {decision.endpoint}
            else:
                flight.tried.add(decision.endpoint)
            record = self.endpoints.get(decision.endpoint)
            if record is None:  # removed between the decision and now
                continue
            eligible = decision.eligible if decision.eligible is not None else len(pending)
            is_last = flight.attempts >= self.settings.max_attempts or eligible <= 1
            attempt = Attempt(flight, decision, record, is_last)
            if self.flow is not None:
                self._place(attempt)
            return attempt

    def fallbacks(self, attempt: Attempt) -> list[str]:
        """The other candidates, best first: for a transport that hands the whole list on
        (Envoy's destination header takes several endpoints)."""
        return self.picker.fallbacks(attempt.decision)

    def destinations(self, attempt: Attempt, limit: int | None = None) -> list[str]:
        """Where a proxy may send the attempt, best first: the chosen endpoint, then fallbacks,
        at most ``limit`` of them (``None``: as many as the picker chose, its
        ``maxNumOfEndpoints``, one by default). One is what every proxy configuration parses; a
        list only helps a proxy that walks it on retry (Envoy's ``override_host`` policy)."""
        count = attempt.decision.picked if limit is None else limit
        if count <= 1:
            return [attempt.endpoint]
        return [attempt.endpoint, *self.picker.fallbacks(attempt.decision)][:count]

    def started(self, attempt: Attempt) -> None:
        """The attempt is being sent: in-flight load on every pod that works for it, the
        half-open probe taken, the PreRequest index updates handed to the deferral."""
        decision = attempt.decision
        if decision.predicted_ttft_s is not None:
            attempt.sent_at = self.clock()
        self.picker.started(decision)
        self._breaker.begin(decision.endpoint)
        if decision.pre_request is not None:
            self._defer(decision.pre_request)
        trace = attempt.flight.trace
        if trace is not None:
            attempt.propagation = trace.sending(decision.endpoint, attempt.flight.attempts)

    def first_byte(self, attempt: Attempt, status: int) -> None:
        """The endpoint answered and sent its first body bytes (the attempt is committed)."""
        now = self.clock()
        attempt.record.health.record_success()
        endpoint = attempt.decision.endpoint
        if status >= 500:  # the last attempt's error, passed through
            self._breaker.failure(endpoint)
        else:
            self._breaker.success(endpoint)
        flight = attempt.flight
        flight.first_byte_s = now - flight.received
        self.picker.first_token(attempt.decision)
        if attempt.placed > 0:  # its prompt is prefilled: no longer the pod's backlog
            self._prefilled(attempt)
        if flight.trace is not None:
            flight.trace.first_byte(status)
        predicted = attempt.decision.predicted_ttft_s
        if (
            predicted is not None
            and attempt.sent_at is not None
            and self._observer is not None
            and status < 400
            and flight.view.first_byte_ends_prefill
        ):
            self._observer.ttft_observed(endpoint, predicted, now - attempt.sent_at)

    def stage_done(self, attempt: Attempt, endpoint: str) -> None:
        """The encode or prefill legs on ``endpoint`` for this attempt are all over (the
        transport ran them itself, gateway-orchestrated, or a routing sidecar said so): that
        pod's load for the request is released before the first token."""
        self.picker.stage_done(attempt.decision, endpoint)

    def usage(self, attempt: Attempt, usage: Usage) -> None:
        """Tokens the endpoint reported for the attempt. Flow control's media-aware fairness
        charges the flow the output actually generated instead of the estimate."""
        flight = attempt.flight
        key = flight.flow
        if self.flow is not None and key is not None and flight.output_estimate:
            delta = self.flow.output_correction(key.priority, flight.output_estimate, usage.completion_tokens)
            flight.output_estimate = 0
            self.flow.dispatcher.charge(key.priority, key.fairness_id, delta)

    def broke(self, attempt: Attempt, detail: str) -> None:
        """The stream broke after the first byte: counts against the endpoint."""
        attempt.flight._failed(f"{attempt.endpoint}: stream broke: {detail}")
        self._breaker.failure(attempt.endpoint)
        if attempt.flight.trace is not None:
            attempt.flight.trace.broke(detail)

    def finished(self, attempt: Attempt, *, ok: bool, sent: int = 0) -> None:
        """The attempt ended (``ok``: the response completed; ``sent``: body bytes the client
        got from it): its load is released."""
        decision = attempt.decision
        self._breaker.release(decision.endpoint)
        self.picker.finished(decision, ok=ok)
        if attempt.flight.trace is not None:
            attempt.flight.trace.attempt_done(ok, sent)
        if attempt.placed >= 0:
            self._unplace(attempt)

    def retry(
        self, attempt: Attempt, reason: str, detail: str, *, unreachable: bool = False
    ) -> Attempt | None:
        """The attempt failed before its first byte (``reason``: ``connect``, ``timeout``,
        ``reset`` or the HTTP status). Returns the next attempt, excluding every endpoint tried,
        or ``None`` when the request gets no more (last attempt, or the retry budget is spent).
        ``unreachable``: the endpoint refused or reset the connection (its health says so)."""
        flight = attempt.flight
        endpoint = attempt.endpoint
        flight._failed(f"{endpoint}: {detail}")
        flight.last_error = detail
        if unreachable:
            attempt.record.health.record_failure(f"connect: {detail}")
        if reason != "429":  # shedding load is not sickness
            self._breaker.failure(endpoint)
        if self._observer is not None:
            self._observer.attempt_failed(endpoint, reason)
        if flight.trace is not None:
            flight.trace.failed(endpoint, reason, detail)
        if attempt.is_last or not self._budget.try_retry():
            return None
        if self._observer is not None:
            self._observer.retried(reason)
        return self.decide(flight)

    def moved(self, attempt: Attempt, endpoint: str, detail: str) -> Attempt | None:
        """The transport's proxy sent the request to ``endpoint`` instead (Envoy walking the
        fallback list after ``attempt`` failed before its first byte). ``attempt`` ends as a
        failure of its endpoint; the returned attempt, on ``endpoint``, is to be started so that
        the pod that serves carries the load. ``None`` when ``endpoint`` is not a known one."""
        flight = attempt.flight
        record = self.endpoints.get(endpoint)
        self.finished(attempt, ok=False)
        flight._failed(f"{attempt.endpoint}: {detail}")
        self._breaker.failure(attempt.endpoint)
        if self._observer is not None:
            self._observer.attempt_failed(attempt.endpoint, "proxy_retry")
        if record is None:
            return None
        try:
            decision = self.picker.decide(
                flight.view, [record], self.clock(), request_id=flight.request_id, headers=flight.headers,
                debug=flight.debug, tenant=flight.tenant,
            )  # fmt: skip
        except NoEndpoint:  # the scheduler's filters would not have sent it there; nothing to charge
            return None
        flight.decision = decision
        flight.attempts += 1
        moved = Attempt(flight, decision, record, True)
        if self.flow is not None:
            self._place(moved)
        return moved

    # -- endpoints ------------------------------------------------------------------------------

    def forget(self, endpoint: str) -> None:
        """``endpoint`` left the fleet: the picker's indexes and the breaker drop it."""
        self.picker.forget(endpoint)
        self._breaker.forget(endpoint)
        if self.flow is not None:
            self.flow.dispatcher.forget(endpoint)

    def refreshed(self, endpoint: str) -> None:
        """``endpoint``'s metrics were just scraped: flow control releases what now has room."""
        flow = self.flow
        if flow is not None:
            flow.dispatcher.refreshed(endpoint)
            if flow.dispatcher.count:
                flow.dispatcher.pump(self.clock())
                self._arm()

    # -- flow control -----------------------------------------------------------------------------

    def hold(
        self, flight: Flight, released: Callable[[], None], refused: Callable[[Refusal], None]
    ) -> HeldRequest | None:
        """Put ``flight`` under flow control (on only): ``released()`` is called once it may go
        (its first attempt already decided: :meth:`decide` returns it), possibly before this
        returns; ``refused(error)`` when it is turned away (429/503), or when deciding it on its
        release found the client's own mistake (a :class:`RequestError`, e.g. a modality the
        model does not take, priced only then). Returns its held form while
        it may still be held (``None`` when it went at once). The transport of a coroutine uses
        :meth:`admit`; one driven by callbacks (the discrete-event benchmark) calls this after
        :meth:`admit_now` said it could not be admitted at once, and :meth:`expire_held` at
        :meth:`next_expiry`."""
        flow = self.flow
        assert flow is not None, "flow control is off"
        now = self.clock()
        if flight._free is not None and not flow.dispatcher.count:
            # admit_now found room and nothing is held: it goes now, without a held form. It is
            # decided first and charged the tokens the decision priced (the scheduler's token
            # producer), so it is priced once; the gate prices only what the picker did not.
            ticket = flow.ticket(flight.view, flight.headers, flight.identity, priced=False)
            key = flight.flow = ticket.key
            flight._prompt_tokens = -1  # not priced yet: _place takes the decision's
            ready = flight._ready = self._decide(flight)
            cost = 0.0
            if ready is not None and flow.prices(key.priority):  # None: it goes nowhere, costs nothing
                tokens, media = self._tokens(flight, ready)
                cost, flight.output_estimate = flow.cost(key.priority, flight.view, tokens, media)
            flow.dispatcher.passed(key, cost)
            flight._early = True
            released()
            return None
        ticket = flow.ticket(flight.view, flight.headers, flight.identity)
        flight.flow = ticket.key
        flight.output_estimate = ticket.expected_output
        flight._prompt_tokens = ticket.prompt_tokens

        def release() -> None:
            # Called from whatever freed the room (another request's end, a scrape): the
            # request's own error is its answer, never an exception in that caller's path.
            flight.held_s = self.clock() - now
            try:
                flight._ready = self._decide(flight)
            except RequestError as exc:
                refused(exc)
                return
            flight._early = True
            released()

        def reject(reason: str) -> None:
            refused(self._refusal(reason, flight))

        names = [r.name for r in flight.candidates]
        item = flow.held(ticket, flight.view, names, now, release, reject)
        flow.dispatcher.submit(item, now)
        if item.queued:
            self._arm()
        return item

    def withdraw(self, held: HeldRequest) -> None:
        """The client of a held request hung up: it leaves its queue now."""
        if self.flow is not None and self.flow.dispatcher.withdraw(held):
            self._arm()

    def next_expiry(self) -> float | None:
        """When the earliest held request's TTL ends, on the controller's clock."""
        return self.flow.dispatcher.next_expiry() if self.flow is not None else None

    def expire_held(self) -> None:
        """Refuse the held requests whose TTL has ended (503)."""
        self._timer = None
        if self.flow is not None:
            self.flow.dispatcher.expire(self.clock())
            self._arm()

    async def _held(self, flight: Flight) -> None:
        """Hold ``flight`` until flow control releases it; raises :class:`Overloaded` when it is
        refused. A cancelled wait (the client went away) withdraws it at once."""
        loop = self._loop = asyncio.get_running_loop()
        waiter: asyncio.Future[None] = loop.create_future()

        def refused(error: Refusal) -> None:
            if not waiter.done():
                waiter.set_exception(error)

        def released() -> None:
            if not waiter.done():
                waiter.set_result(None)

        item = self.hold(flight, released, refused)
        try:
            await waiter
        except asyncio.CancelledError:
            if item is not None and item.queued:
                self.withdraw(item)
            elif flight._early and flight._ready is not None:  # released as the client left
                flight._early = False
                ready, flight._ready = flight._ready, None
                self._unplace(ready)
            raise

    def _unsaturated(self, candidates: list[EndpointRecord]) -> list[EndpointRecord]:
        flow = self.flow
        assert flow is not None
        now = self.clock()
        saturated = flow.dispatcher.detector.saturated
        loads = flow.dispatcher.loads
        return [r for r in candidates if not saturated(r.metrics, loads.get(r.name), now)]

    def _place(self, attempt: Attempt) -> None:
        flow = self.flow
        assert flow is not None
        # The decision's priced tokens; a picker that does not report them (the DES's) leaves
        # the ones flow control priced (priced now if it had not, when the detector counts them).
        tokens = attempt.decision.request_tokens
        if not tokens:
            tokens = attempt.flight._prompt_tokens
            if tokens < 0:
                tokens = self._tokens(attempt.flight, None)[0] if flow.counts_tokens else 0
        attempt.placed = tokens
        flow.dispatcher.placed(attempt.decision.endpoint, tokens)

    def _tokens(self, flight: Flight, attempt: Attempt | None) -> tuple[int, int]:
        """``flight``'s prompt and media tokens: the decision's (the scheduler priced them), else
        the gate's, priced once and kept."""
        if attempt is not None and (total := attempt.decision.request_tokens):
            return total, total - attempt.decision.tokens_by_modality.get("text", 0)
        if flight._prompt_tokens < 0:
            assert self.flow is not None
            flight._prompt_tokens, flight._media_tokens = self.flow.tokens(flight.view)
        return flight._prompt_tokens, flight._media_tokens

    def _prefilled(self, attempt: Attempt) -> None:
        flow = self.flow
        assert flow is not None
        flow.dispatcher.prefilled(attempt.decision.endpoint, attempt.placed)
        attempt.placed = 0
        if flow.dispatcher.count:
            flow.dispatcher.pump(self.clock())
            self._arm()

    def _unplace(self, attempt: Attempt) -> None:
        """``attempt``'s load leaves its endpoint; the held requests that now fit go."""
        flow = self.flow
        assert flow is not None
        flow.dispatcher.finished(attempt.decision.endpoint, attempt.placed)
        attempt.placed = -1
        if flow.dispatcher.count:
            flow.dispatcher.pump(self.clock())
            self._arm()

    def _arm(self) -> None:
        """The TTL timer at the earliest held request's expiry (on the event loop, when there is
        one: the discrete-event benchmark calls :meth:`expire_held` itself)."""
        if self._loop is None:
            return
        due = self.next_expiry()
        if self._timer is not None:
            if due == self._timer_due:
                return
            self._timer.cancel()
            self._timer = None
        if due is not None:
            self._timer_due = due
            self._timer = self._loop.call_later(max(0.0, due - self.clock()), self.expire_held)

    def _refusal(self, reason: str, flight: Flight) -> Overloaded:
        retry = self.flow.settings.retry_after_s if self.flow is not None else 1
        status = STATUS[reason]
        if reason == TTL:
            held = self.clock() - flight.received
            message = f"held for {held:.1f} s while every endpoint stayed saturated; retry later"
        else:
            message = _REFUSALS.get(reason, _REFUSALS[QUEUE_FULL])
        return Overloaded(message, retry, status=status, code=f"flow_control_{reason}")

    # -- candidates: the one place they are narrowed ---------------------------------------------

    def _serving(self, model: str, subset: Collection[str] | None) -> list[EndpointRecord]:
        """Healthy endpoints that serve ``model`` (or whose models are not known yet), within
        ``subset`` when given.

        Raises a 404 :class:`RequestError` when every endpoint lists its models and none lists
        this one: that is a client mistake, not a fleet problem.
        """
        out: list[EndpointRecord] = []
        serves = False
        for r in self.endpoints.each():  # one pass, no copy of the set: this runs on every request
            if not r.models or model in r.models:
                serves = True
                if r.health.healthy and (subset is None or r.name in subset):
                    out.append(r)
        if not serves and len(self.endpoints):
            models = self.endpoints.models()
            hint = did_you_mean(model, models)  # case-insensitive: 'qwen/qwen3-vl-8b' finds its id
            raise RequestError(
                f"The model '{model}' is not served here{hint}; available: {', '.join(models[:20])}",
                param="model",
                status=404,
                code="model_not_found",
            )
        return out


_REFUSALS = {
    SHED: "every endpoint for this request is saturated and its objective is sheddable; retry later",
    EVICTED: "a more important request took this sheddable request's place in the queue; retry later",
    BYTES_FULL: "the gateway holds as many request bytes as it may; retry shortly",
    QUEUE_FULL: "the gateway holds as many requests as it may for this flow; retry shortly",
}


def _nothing() -> None:
    pass


def _raise(error: Refusal) -> None:
    raise error


def run_hook(hook: Callable[[], None]) -> None:
    """A PreRequest hook's failure is logged, never the request's failure."""
    try:
        hook()
    except Exception:
        log.exception("PreRequest hook failed")
