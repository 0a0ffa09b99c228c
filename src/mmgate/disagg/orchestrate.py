"""Running the encode and prefill legs of one request, before its decode pod gets it.

The sidecar beside a decode pod, the gateway (``orchestrator: gateway``) and the discrete-event
benchmark all call :meth:`Orchestrator.prepare`: the encode legs go out in parallel, one per
distinct media item, to the encoder :mod:`mmgate.disagg.plan` names for it; their
``ec_transfer_params`` are merged; then, when a prefill pod was named, the prefill leg runs and its
``kv_transfer_params`` go to the decode request unchanged. What comes back is the body the decode
(or PD) pod serves, which the caller sends and relays as any request.

Each leg has its own timeout. A transient failure (no connection, a reset, a timeout, 429 or a
5xx) is retried on another pod of the same pool, a bounded number of times. When a stage cannot
be done the configured fallback decides: ``local`` sends the request on with what the stage did not
provide left to the decode pod (it encodes the media, or prefills, itself), ``fail`` answers 503
naming the stage. A request is never dropped.

How a leg travels is a seam, :class:`LegTransport`: :class:`PoolTransport` posts it over the
upstream pool (sidecar and gateway), the DES runs it on simulated pods in virtual time
(:mod:`mmgate_bench.routing.des`). The orchestration above it is one piece of code for all three.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TypeVar

import msgspec
from prometheus_client import CollectorRegistry, Counter

from mmgate.disagg import plan
from mmgate.http.client import UpstreamError, UpstreamPool
from mmgate.request.pieces import Body as RequestBody
from mmgate.request.pieces import joined
from mmgate.request.view import RequestView
from mmgate.scheduling.encoder_assignment import LOCAL

log = logging.getLogger("mmgate.disagg")

Fallback = Literal["local", "fail"]
TRANSIENT_STATUS = frozenset({429, 500, 502, 503, 504})
MAX_LEG_RESPONSE = 16 * 1024 * 1024  # an encode or prefill answer is small JSON; more is not one

_DROPPED_LEG_HEADERS = frozenset({"content-type", "x-request-id", "content-length"})

T = TypeVar("T")


@dataclass(slots=True)
class OrchestrationSettings:
    encode_timeout_s: float = 30.0  # one encode leg, connect to last byte
    prefill_timeout_s: float = 120.0  # the prefill leg, connect to last byte
    stage_retries: int = 1  # further tries of a failed leg, each on another pod of its pool
    fallback: Fallback = "local"  # when a stage cannot be done: decode pod does it, or 503
    path: str = "/v1/chat/completions"


@dataclass(slots=True)
class Stages:
    """Where the legs may go. ``encoders``: as the routing header lists them (one per distinct
    item when the gateway planned per item, else a pool spread round-robin); ``prefillers``: the
    chosen prefill pod first. ``*_spares``: other pods of the pool, for retries."""

    encoders: list[str] = field(default_factory=list)
    prefillers: list[str] = field(default_factory=list)
    encoder_spares: list[str] = field(default_factory=list)
    prefiller_spares: list[str] = field(default_factory=list)

    @property
    def any(self) -> bool:
        return bool(self.encoders or self.prefillers)


@dataclass(slots=True)
class Prepared:
    """The decode request, and what the stages did for it."""

    body: bytes
    encoded: int = 0  # media items whose encoder output came from an encoder
    prefilled: bool = False  # the prefill pod computed the KV
    fallbacks: list[str] = field(default_factory=list)  # stages left to the decode pod


@dataclass(frozen=True, slots=True)
class Leg:
    """One encode or prefill request to one pod. ``request_id`` is the client request's (the
    leg's own ``x-request-id``, in ``headers``, adds ``-enc-N`` or ``-prefill`` to it)."""

    stage: str  # "encode" or "prefill"
    host: str  # host:port, as the routing header names it
    path: str
    headers: Sequence[tuple[str, str]]
    body: bytes
    timeout_s: float
    request_id: str


class LegTransport(Protocol):
    """How legs reach their pods: ``send`` one leg and return its status and body (raising
    ``OSError``, ``TimeoutError``, ``ValueError`` or :class:`UpstreamError` when it did not get
    an answer); ``together`` awaits several legs at once, each one's result or exception in order
    (``asyncio.gather(..., return_exceptions=True)`` over sockets; an event queue in the DES)."""

    async def send(self, leg: Leg) -> tuple[int, bytes]: ...

    async def together(self, calls: Sequence[Awaitable[T]]) -> list[T | BaseException]: ...


class PoolTransport:
    """Legs over a keep-alive :class:`UpstreamPool`, each within its timeout (connect to last
    byte), an answer larger than ``MAX_LEG_RESPONSE`` refused."""

    def __init__(self, pool: UpstreamPool) -> None:
        self.pool = pool

    async def send(self, leg: Leg) -> tuple[int, bytes]:
        name, port = plan.split_host(leg.host)
        async with asyncio.timeout(leg.timeout_s):
            upstream = await self.pool.request(name, port, "POST", leg.path, leg.headers, leg.body)
            pieces: list[bytes] = []
            size = 0
            try:
                while chunk := await upstream.read():
                    size += len(chunk)
                    if size > MAX_LEG_RESPONSE:
                        raise ValueError(f"answer larger than {MAX_LEG_RESPONSE} bytes")
                    pieces.append(chunk)
            except BaseException:
                upstream.close()
                raise
            upstream.release()
        return upstream.status, b"".join(pieces)

    async def together(self, calls: Sequence[Awaitable[T]]) -> list[T | BaseException]:
        return await asyncio.gather(*calls, return_exceptions=True)


class StageFailed(Exception):
    """A stage could not be done and the fallback is ``fail``: a 503 with this message."""


class LegFailed(Exception):
    def __init__(self, stage: str, detail: str) -> None:
        super().__init__(f"{stage}: {detail}")
        self.stage = stage
        self.detail = detail


class StageMetrics:
    """The legs' counters (the sidecar's ``/metrics``; the gateway's own registry in gateway mode)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.legs = Counter(
            "mmgate_disagg_legs", "Encode and prefill legs sent, by stage and outcome (ok, retried, failed)",
            ["stage", "outcome"], registry=registry,
        )  # fmt: skip
        self.fallbacks = Counter(
            "mmgate_disagg_fallbacks", "Stages not done, by stage and what followed (local, fail)",
            ["stage", "action"], registry=registry,
        )  # fmt: skip
        self.refused = Counter(
            "mmgate_disagg_refused_hosts", "Routing-header hosts refused (not allow-listed), by stage",
            ["stage"], registry=registry,
        )  # fmt: skip


class Orchestrator:
    def __init__(
        self, transport: LegTransport, settings: OrchestrationSettings, *, metrics: StageMetrics | None = None
    ) -> None:
        self.transport = transport
        self.settings = settings
        self.metrics = metrics

    async def prepare(
        self,
        body: RequestBody,
        view: RequestView,
        stages: Stages,
        headers: Sequence[tuple[str, str]],
        request_id: str,
        *,
        released: Callable[[str], None] | None = None,
    ) -> Prepared:
        """The decode request for ``body`` after its encode and prefill legs. Raises
        :class:`StageFailed` when a stage failed and the fallback is ``fail``. ``released`` is
        called with each stage pod the plan named once no leg of the request is left on it
        (answered, failed or moved to a retry pod), so its load can go before the first token."""
        request: plan.Body = msgspec.json.decode(joined(body))  # every leg's body is built from it
        base = [(k, v) for k, v in headers if k.lower() not in _DROPPED_LEG_HEADERS]
        base.append(("content-type", "application/json"))
        prepared = Prepared(b"")
        ec: dict[str, Any] = {}
        items = plan.media_items(request, ((a.identity, a.field) for a in view.assets))
        chosen = plan.spread(len(items), stages.encoders) if stages.encoders else []
        if LOCAL in chosen:  # items the serving pod encodes itself: no leg
            items = [item for item, host in zip(items, chosen, strict=True) if host != LOCAL]
            chosen = [host for host in chosen if host != LOCAL]
        holds = _Holds([*chosen, *stages.prefillers[:1]], released)
        holds.drop([*stages.encoders, *stages.prefillers])  # named, but no leg goes there: free now
        if chosen:
            ec = await self._encode(request, items, chosen, stages, base, request_id, prepared, holds)
        kv: dict[str, Any] | None = None
        if stages.prefillers:
            kv = await self._prefill(request, ec, stages, base, request_id, prepared, holds)
        if kv is None and stages.prefillers:
            ec = {}  # the decode pod prefills itself; without the media's outputs it encodes them
        prepared.body = msgspec.json.encode(plan.decode_body(request, ec_params=ec, kv_params=kv))
        return prepared

    # -- stages ---------------------------------------------------------------------------------

    async def _encode(
        self,
        request: plan.Body,
        items: list[plan.MediaItem],
        chosen: list[str],
        stages: Stages,
        headers: list[tuple[str, str]],
        request_id: str,
        prepared: Prepared,
        holds: _Holds,
    ) -> dict[str, Any]:
        pool = [h for h in dict.fromkeys([*stages.encoders, *stages.encoder_spares]) if h != LOCAL]
        legs = [
            self._leg(
                "encode",
                [host, *(h for h in pool if h != host)],
                plan.encode_body(request, item),
                [*headers, ("x-request-id", f"{request_id}-enc-{i}")],
                self.settings.encode_timeout_s,
                request_id,
                holds,
            )
            for i, (item, host) in enumerate(zip(items, chosen, strict=True))
        ]
        answers = await self.transport.together(legs)
        ok: list[Mapping[str, Any]] = []
        failed: list[str] = []
        for answer in answers:
            if isinstance(answer, LegFailed):
                failed.append(answer.detail)
            elif isinstance(answer, BaseException):
                raise answer
            else:
                ok.append(answer)
        if failed:
            self._fall_back("encode", f"{len(failed)} of {len(items)} media item(s) not encoded: {failed[0]}")
            prepared.fallbacks.append("encode")
        merged = plan.merge_ec_params(ok)
        prepared.encoded = len(merged)
        return merged

    async def _prefill(
        self,
        request: plan.Body,
        ec: Mapping[str, Any],
        stages: Stages,
        headers: list[tuple[str, str]],
        request_id: str,
        prepared: Prepared,
        holds: _Holds,
    ) -> dict[str, Any] | None:
        hosts = list(dict.fromkeys([*stages.prefillers, *stages.prefiller_spares]))
        try:
            answer = await self._leg(
                "prefill",
                hosts,
                plan.prefill_body(request, ec),
                [*headers, ("x-request-id", f"{request_id}-prefill")],
                self.settings.prefill_timeout_s,
                request_id,
                holds,
            )
        except LegFailed as exc:
            self._fall_back("prefill", exc.detail)
            prepared.fallbacks.append("prefill")
            return None
        kv = answer.get("kv_transfer_params")
        if not isinstance(kv, dict):
            self._fall_back("prefill", "the prefill pod returned no kv_transfer_params")
            prepared.fallbacks.append("prefill")
            return None
        prepared.prefilled = True
        return kv

    def _fall_back(self, stage: str, detail: str) -> None:
        action = self.settings.fallback
        if self.metrics is not None:
            self.metrics.fallbacks.labels(stage, action).inc()
        log.warning("%s stage failed (%s): %s", stage, action, detail)
        if action == "fail":
            raise StageFailed(f"the {stage} stage is unavailable: {detail}")

    # -- one leg --------------------------------------------------------------------------------

    async def _leg(
        self,
        stage: str,
        hosts: Sequence[str],
        body: plan.Body,
        headers: Sequence[tuple[str, str]],
        timeout_s: float,
        request_id: str,
        holds: _Holds,
    ) -> dict[str, Any]:
        """POST ``body`` to ``hosts[0]``; on a transient failure to the next host, up to
        ``stage_retries`` more times. Raises :class:`LegFailed` with the last reason."""
        data = msgspec.json.encode(body)
        detail = "no pod to send it to"
        for n, host in enumerate(hosts[: 1 + max(0, self.settings.stage_retries)]):
            if n:
                holds.take(host)
                if self.metrics is not None:
                    self.metrics.legs.labels(stage, "retried").inc()
            try:
                leg = Leg(stage, host, self.settings.path, headers, data, timeout_s, request_id)
                answer, detail, final = await self._send(leg)
            finally:
                holds.give(host)  # this pod's part of the leg is over, however it ended
            if answer is not None:
                if self.metrics is not None:
                    self.metrics.legs.labels(stage, "ok").inc()
                return answer
            if final:
                break  # the pod refused the request itself; another would too
        if self.metrics is not None:
            self.metrics.legs.labels(stage, "failed").inc()
        raise LegFailed(stage, detail)

    async def _send(self, leg: Leg) -> tuple[dict[str, Any] | None, str, bool]:
        """One try of ``leg``: its JSON answer, or ``None``, why, and whether another pod would
        refuse it too (a 4xx)."""
        host = leg.host
        try:
            status, answer = await self.transport.send(leg)
        except (UpstreamError, OSError, ValueError) as exc:
            return None, f"{host}: {type(exc).__name__}: {exc}", False
        except TimeoutError:
            return None, f"{host}: no answer within {leg.timeout_s:g} s", False
        if status != 200:
            return None, f"{host}: HTTP {status}", status not in TRANSIENT_STATUS
        try:
            decoded = msgspec.json.decode(answer)
        except msgspec.DecodeError:
            return None, f"{host}: the answer is not JSON", False
        if not isinstance(decoded, dict):
            return None, f"{host}: the answer is not a JSON object", False
        return decoded, "", False


class _Holds:
    """The stage pods still working for one request: each planned leg counts on the pod the plan
    named for it (and a retry on the pod it moved to) until that pod's part of the leg is over.
    A pod left with none is handed to ``released``, once per time it empties (a retry landing on
    a pod already released charges nothing new: the scheduler holds a stage pod once)."""

    __slots__ = ("left", "released")

    def __init__(self, planned: Sequence[str], released: Callable[[str], None] | None) -> None:
        self.released = released
        self.left: dict[str, int] = {}
        for host in planned:
            self.left[host] = self.left.get(host, 0) + 1

    def take(self, host: str) -> None:
        self.left[host] = self.left.get(host, 0) + 1

    def give(self, host: str) -> None:
        left = self.left.get(host, 0) - 1
        self.left[host] = max(0, left)
        if left == 0 and self.released is not None:
            self.released(host)

    def drop(self, hosts: Sequence[str]) -> None:
        """Pods named for the stage that get no leg at all."""
        for host in dict.fromkeys(hosts):
            if host not in self.left:
                self.left[host] = 1
                self.give(host)


def strip_transfer_fields(body: bytes) -> bytes:
    """A JSON response body without the transfer parameters (only the stages read them)."""
    if b"_transfer_params" not in body:
        return body
    try:
        doc = msgspec.json.decode(body)
    except msgspec.DecodeError:
        return body
    if not isinstance(doc, dict) or not any(k in doc for k in plan.TRANSFER_FIELDS):
        return body
    for key in plan.TRANSFER_FIELDS:
        doc.pop(key, None)
    return msgspec.json.encode(doc)
