"""Discrete-event mode: the real scheduler and the real simulated engines, in virtual time.

Nothing is modelled twice. Each system's :class:`~mmgate.scheduling.Scheduler` is built from its
YAML exactly as ``mmgate serve`` builds it and driven by the gateway's own
:class:`~mmgate.control.RequestController`; each pod is a :class:`mmgate.sim.core.Engine` built
as ``mmgate sim`` builds it, and requests are priced and laid out by the same token code the
simulated server runs. Only the clock and the transport differ:

- arrivals follow the same schedule the HTTP load generator uses;
- the controller decides at arrival and hears started / stage done / first token / usage /
  finished at the times a gateway would see them, so in-flight load lands on every stage's pod
  (encode and prefill targets too, each until its own legs end) exactly as behind HTTP;
  PreRequest index updates run at once (virtual time has no "off the hot path");
- every ``scrape_interval_s`` the gateway's view of each pod (waiting, running, KV usage) is
  refreshed from the engine's stats: between scrapes the scheduler sees stale numbers, as it
  does over HTTP, and numbers older than the config's staleness threshold are ignored;
- a one-way network delay separates gateway and pods (requests in, tokens out);
- a decision with routing headers (an E/PD, E/P/D or P/D config) runs its legs through the
  gateway's own :class:`~mmgate.disagg.orchestrate.Orchestrator` (the gateway-orchestrated mode)
  over a virtual transport: an encode leg waits its turn on an encode pod (``role: encode``, the
  ``mmgate sim --mm-encoder-only`` model: its front end loads and preprocesses the media, then
  its encoder runs), a prefill leg runs on the prefill pod's engine, and the
  decode pod waits for the KV or the encoder outputs the transfer parameters name
  (:func:`mmgate.sim.roles.transfer_seconds`, as the HTTP simulator does) before its engine runs;
- a system with ``precise-prefix-cache-producer`` reads a block index fed by the engines' own KV
  events, one network delay after the step that produced them (:mod:`~mmgate_bench.routing.kv_feed`);
  its engines then hash blocks with the producer's algorithm and seed, as real pods must.

The output is the same :class:`~mmgate_bench.routing.records.RungResult` the HTTP mode produces. ITL is
kept as (step duration, tokens) pairs rather than one number per token: every decoding request
gets one token per engine step, so the step durations weighted by batch size *are* the ITL
distribution, at a cost per step instead of per token.
"""

from __future__ import annotations

import functools
import heapq
import itertools
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

import msgspec

from mmgate.config import load_config
from mmgate.control import Attempt, NoCandidates, Overloaded, RequestController, SchedulerPicker, Usage
from mmgate.control.controller import Flight as ControlFlight
from mmgate.control.flow import FlowGate, flow_settings_of
from mmgate.control.flow.classify import FAIRNESS_ID_HEADER, OBJECTIVE_HEADER
from mmgate.control.flow.queues import HeldRequest
from mmgate.datalayer.endpoints import EndpointRecord, EndpointRegistry, parse_endpoint
from mmgate.datalayer.metrics import MetricsSnapshot
from mmgate.disagg import plan
from mmgate.disagg.orchestrate import Leg, OrchestrationSettings, Orchestrator, Prepared, StageFailed
from mmgate.disagg.stages import stages_with_spares
from mmgate.errors import RequestError
from mmgate.modelserver.transfer import (
    Transfer,
    encoder_response_params,
    prefill_response_params,
    read_transfer,
)
from mmgate.request.view import Api, RequestView
from mmgate.scheduling import Scheduler, build_scheduler
from mmgate.scheduling.plugins.precise_prefix_cache_producer import TokenProcessorConfig
from mmgate.scheduling.registry import PluginRegistry
from mmgate.sim.core import Engine, MediaPayload, SimRequest, StepOutput
from mmgate.sim.core.media import payloads_of
from mmgate.sim.encode_only import EncodeOnly
from mmgate.sim.profiles import family_of, load_profile
from mmgate.sim.roles import transfer_seconds
from mmgate.sim.spec import PodSpec, engine_config, transfer_times
from mmgate.tokens import PricingConfig, TokenSequence, build_sequence, price
from mmgate.tokens.sequence import MMItem
from mmgate_bench.routing.kv_feed import KVEventFeed, precise_hashing
from mmgate_bench.routing.loadgen import RungProgress
from mmgate_bench.routing.records import CacheCounters, Ladder, RequestRecord, RungResult, arrival_times
from mmgate_bench.routing.systems import System
from mmgate_bench.routing.virtual import Outcome, Pending, VirtualTasks
from mmgate_bench.workloads.media import MediaReferences
from mmgate_bench.workloads.synthetic import RawItem, WorkItem, Workload

T = TypeVar("T")

# Event kinds, in the order they are handled when simultaneous.
(_FINISH, _FIRST, _STEP, _ADD, _RECEIVE, _SCRAPE, _ARRIVE, _ENCODE, _ANSWER, _LEG_TIMEOUT, _KV,
 _FLOW_TTL) = range(12)  # fmt: skip


@dataclass(frozen=True, slots=True)
class DesOptions:
    """``profile``: sim timing profile; ``pods``: engines; delays in seconds. ``scrape_interval_s``
    None uses the config's ``mmgate.scrapeIntervalMs``. ``roles``: each pod's llm-d role in
    order (``encode``, ``prefill``, ``decode``, ``prefill-decode``...); pods beyond the list have
    none. An ``encode`` pod runs the encoder only. ``pod_settings``: :class:`PodSpec` fields for
    every pod (``kv_transfer_s_per_token``, ``ec_transfer_s_per_token``); ``orchestration``: the
    legs' timeouts, retries and fallback, as ``mmgate.disaggregation`` configures the gateway.
    ``profiles``: each pod's timing profile in order, for a fleet of mixed hardware; pods beyond
    the list run ``profile`` (whose model and family price the requests)."""

    profile: str = "qwen3-vl-32b-h200-tp2"
    pods: int = 8
    roles: tuple[str, ...] = ()
    profiles: tuple[str, ...] = ()
    network_delay_s: float = 0.0005
    scrape_interval_s: float | None = None
    engine: dict[str, Any] = field(default_factory=dict)
    seed: int = 0
    pod_settings: dict[str, Any] = field(default_factory=dict)
    orchestration: OrchestrationSettings = field(default_factory=OrchestrationSettings)


@dataclass(slots=True, eq=False)
class _Pod:
    index: int
    engine: Engine
    endpoint: EndpointRecord
    spec: PodSpec
    encoder: EncodeOnly | None = None  # an encode-only pod: legs queue for its encoder
    busy: bool = False
    pending: StepOutput | None = None
    encode_free_at: list[float] = field(default_factory=lambda: [0.0])  # when each encoder lane is next free
    front_free_at: list[float] = field(default_factory=lambda: [0.0])  # an encode pod's front-end workers
    encoder_s: float = 0.0  # encoder time: the engine's own items, or the encode-only pod's legs
    legs: int = 0  # encode or prefill legs it was sent


@dataclass(frozen=True, slots=True)
class PodReport:
    """What one pod did over the simulation: its role, the engine's encoder seconds and cache
    counters (an encode pod's: its encoder's), the legs it served, and an encode pod's media load."""

    name: str
    role: str | None
    encoder_seconds: float
    encoded_items: int
    encoder_cache_queries: int
    encoder_cache_hits: int
    legs: int
    media_load_seconds: float = 0.0  # an encode pod's front end loading its legs' media


@dataclass(slots=True, eq=False)
class _LegFlight:
    """An encode or prefill leg on a pod, until its answer reaches the orchestration."""

    answer: Pending[tuple[int, bytes]]
    pod: _Pod
    rung: int
    prompt_tokens: int = 0


@dataclass(slots=True, eq=False)
class _Flight:
    record: RequestRecord
    attempt: Attempt
    arrival: float
    pod: _Pod
    rung: int
    item: WorkItem | RawItem | None = None  # kept while its legs run (they read its media)


class _MemoHasher:
    """Wraps an engine's block hasher so a token sequence sent again (to any pod, by any system)
    is hashed once: the DES re-sends the same prepared sequence objects, keyed here by identity.
    The engine gets a fresh list each time (it may extend it with decode blocks)."""

    def __init__(self, inner: Any, memo: dict[tuple[Any, ...], list[Any]]) -> None:
        self._inner = inner
        self._memo = memo
        self._algo = (inner.algo, inner.seed)  # systems hashing differently share no entries

    def block_hashes(
        self, token_ids: Any, mm_items: Any = (), cache_salt: str | None = None, lora: Any = None
    ) -> list[Any]:
        key = (id(token_ids), cache_salt, lora, *self._algo)
        hit = self._memo.get(key)
        if hit is None:
            hit = self._inner.block_hashes(token_ids, mm_items, cache_salt, lora)
            self._memo[key] = hit
        return list(hit)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class _Prepared:
    """Views and engine sequences per workload item, made once: the same item is re-sent many
    times over a ladder and its pricing does not change."""

    def __init__(self, pricing: PricingConfig, model: str) -> None:
        self.pricing = pricing
        self.model = model
        self._cache: dict[str, tuple[RequestView, TokenSequence, int, tuple[MediaPayload, ...]]] = {}
        self._bodies: dict[str, tuple[bytes, dict[bytes, MMItem]]] = {}
        self._loads: dict[str, dict[str, MediaPayload]] = {}
        self.hashes: dict[tuple[Any, ...], list[Any]] = {}

    def get(
        self, item: WorkItem | RawItem
    ) -> tuple[RequestView, TokenSequence, int, tuple[MediaPayload, ...]]:
        """The item's view, engine sequence, output tokens and media payloads (front-end cost)."""
        hit = self._cache.get(item.id)
        if hit is None:
            view = item.view(self.model)
            seq = build_sequence(view, price(view, self.pricing))
            out = item.output_tokens or 16
            hit = (view, seq, out, payloads_of(view.assets))
            self._cache[item.id] = hit
        return hit

    def payloads(self, item: WorkItem | RawItem) -> dict[str, MediaPayload]:
        """What the API server loads for each media item of ``item`` (by identity): an encode
        leg carries one item's part, so its pod loads that payload (the request's, not a
        reference: the leg bodies here name media by reference)."""
        hit = self._loads.get(item.id)
        if hit is None:
            view = self.get(item)[0]
            hit = {}
            for asset in view.assets:
                for payload in payloads_of((asset,)):
                    hit.setdefault(asset.identity, payload)
            self._loads[item.id] = hit
        return hit

    def body(self, item: WorkItem | RawItem) -> tuple[bytes, dict[bytes, MMItem]]:
        """The chat body the orchestration splits into legs (media as references, see
        :class:`MediaReferences`; a replayed body as it is), and its media items by the JSON of
        the content part that carries each: an encode leg's part names its item."""
        hit = self._bodies.get(item.id)
        if hit is None:
            view, seq, _, _ = self.get(item)
            if isinstance(item, WorkItem):
                body = msgspec.json.encode(item.body(MediaReferences(), model=self.model))
            else:
                body = item.body_bytes()
            spans = {m.identity: m for m in reversed(seq.mm_items)}
            located = ((a.identity, a.field) for a in view.assets)
            parts = {
                msgspec.json.encode(media.part): spans[media.identity]
                for media in plan.media_items(msgspec.json.decode(body), located)
                if media.identity in spans
            }
            hit = self._bodies[item.id] = (body, parts)
        return hit


def _build_pods(
    opts: DesOptions, registry: EndpointRegistry, hashing: TokenProcessorConfig | None = None
) -> tuple[list[_Pod], PricingConfig, str]:
    """Engines configured exactly as ``mmgate sim`` configures its pods, named like endpoints.
    With ``hashing`` (a precise system's) they hash as its producer does and record KV events."""
    profile = load_profile(opts.profile)
    pods = []
    for i in range(opts.pods):
        name = opts.profiles[i] if i < len(opts.profiles) else opts.profile
        try:
            spec = PodSpec(
                name=f"pod-{i}", profile=name, seed=opts.seed, engine=dict(opts.engine),
                **opts.pod_settings,
            )  # fmt: skip
        except TypeError as exc:
            raise ValueError(f"pod settings: {exc}") from None
        spec.validate()
        if hashing is None:  # block keys never leave the process: the fast process-local hash
            config = replace(engine_config(spec), prefix_caching_hash_algo="builtin")
        else:
            config = replace(
                engine_config(spec),
                prefix_caching_hash_algo=hashing.hashAlgorithm,
                hash_seed=hashing.hashSeed or None,
                kv_events=True,
            )
        role = opts.roles[i] if i < len(opts.roles) else None
        record = registry.add(parse_endpoint(f"http://10.0.0.{i + 1}:8000", role=role))
        own = profile if name == opts.profile else load_profile(name)
        encoder = (
            EncodeOnly(
                own, mode=config.mm_encoder_tp_mode, lanes=config.tensor_parallel_size,
                front_workers=config.preprocess_workers,
            )
            if role == "encode"
            else None
        )  # fmt: skip
        engine = Engine(own, config)
        if hashing is not None and engine.hasher.block_size != hashing.blockSize:
            raise ValueError(
                f"precise-prefix-cache-producer blockSize {hashing.blockSize} differs from the pods' "
                f"block size {engine.hasher.block_size} (profile {name})"
            )
        pod = _Pod(i, engine, record, spec, encoder)
        if encoder is not None:
            pod.encode_free_at = [0.0] * encoder.lanes
            pod.front_free_at = [0.0] * encoder.front_workers
        pods.append(pod)
    return pods, PricingConfig(family=family_of(profile)), profile.model or profile.name


def _cache_totals(pods: Sequence[_Pod]) -> CacheCounters:
    total = CacheCounters()
    for pod in pods:
        s = _stats(pod)
        total = total + CacheCounters(
            s.prefix_cache_queries, s.prefix_cache_hits, s.encoder_cache_queries, s.encoder_cache_hits
        )
    return total


def _stats(pod: _Pod) -> Any:
    """The pod's stats as its ``/metrics`` shows them (an encode pod: its encoder's counters)."""
    stats = pod.engine.stats()
    return stats if pod.encoder is None else pod.encoder.merge_stats(stats)


class _VirtualLegs:
    """The orchestration's transport in the DES: a leg goes to the simulation's pods and its
    answer comes back in virtual time (:class:`mmgate.disagg.orchestrate.LegTransport`)."""

    def __init__(self, sim: Simulation, tasks: VirtualTasks) -> None:
        self._sim = sim
        self._tasks = tasks

    async def send(self, leg: Leg) -> tuple[int, bytes]:
        return await self._sim.start_leg(leg)

    async def together(self, calls: Sequence[Awaitable[T]]) -> list[T | BaseException]:
        return await self._tasks.together(calls)


class Simulation:
    """One system over one ladder in virtual time."""

    def __init__(
        self,
        system: System,
        opts: DesOptions,
        prepared: _Prepared | None = None,
        *,
        registry: PluginRegistry | None = None,
    ) -> None:
        if system.config is None:
            raise ValueError(f"{system.name} is not an mmgate config; the DES runs mmgate configs only")
        cfg = load_config(system.config)
        self.system = system
        hashing = precise_hashing(cfg.picker)
        self.kv_feed = KVEventFeed() if hashing is not None else None
        self.scheduler: Scheduler = build_scheduler(
            cfg.picker,
            mmgate=cfg.mmgate,
            seed=opts.seed,
            registry=registry,
            kv_blocks=self.kv_feed.index if self.kv_feed is not None else None,
        )
        self.scrape_s = opts.scrape_interval_s or cfg.mmgate.scrapeIntervalMs / 1000.0
        self.delay = opts.network_delay_s
        self.now = 0.0
        endpoints = EndpointRegistry()
        self.pods, pricing, model = _build_pods(opts, endpoints, hashing)
        self.endpoints = [p.endpoint for p in self.pods]
        clock = self.clock
        # Nothing reads a decision's reporting fields here, so the picker does not fill them.
        self.picker = SchedulerPicker(self.scheduler, clock=clock, describe=False)
        # Flow control, when the config turns it on: the same dispatcher as behind HTTP, on
        # virtual time; its TTLs are events here (there is no event loop to arm a timer on).
        flow = flow_settings_of(cfg.picker, cfg.mmgate)
        gate = FlowGate(flow, self._metrics_of, pricing) if flow is not None else None
        self.controller = RequestController(self.picker, endpoints, clock=clock, defer=_at_once, flow=gate)
        self._held: dict[str, tuple[HeldRequest, RequestRecord, int]] = {}
        self._pod_of = {p.endpoint.name: p for p in self.pods}
        self._registry = endpoints
        self.tasks = VirtualTasks()
        self.orchestrator = Orchestrator(_VirtualLegs(self, self.tasks), opts.orchestration)
        self._legs: dict[str, _LegFlight] = {}
        self._leg_ids = itertools.count()
        self.prepared = prepared or _Prepared(pricing, model)
        for pod in self.pods:
            engine: Any = pod.engine
            engine.hasher = _MemoHasher(engine.hasher, self.prepared.hashes)
        self._events: list[tuple[float, int, int, Any]] = []
        self._seq = itertools.count()
        self._flights: dict[str, _Flight] = {}
        self._ids = itertools.count()
        self.steps = 0
        self.requests = 0
        self._itl: list[tuple[float, int]] = []
        # The rung being run: its index, records, requests still open, last completion time.
        self._rung = -2
        self._records: list[RequestRecord] = []
        self._open = 0
        self._last_done = 0.0
        self._fallbacks = 0  # requests of the rung whose stages fell back
        self._progress_cb: Callable[[RequestRecord], None] | None = None
        self._scrape_all()
        self._push(self.scrape_s, _SCRAPE, None)

    def clock(self) -> float:
        """Virtual time: the controller's and the picker's clock."""
        return self.now

    # -- events -----------------------------------------------------------------------------------

    def _push(self, t: float, kind: int, payload: Any) -> None:
        heapq.heappush(self._events, (t, kind, next(self._seq), payload))

    def _metrics_of(self, name: str) -> MetricsSnapshot | None:
        pod = self._pod_of.get(name)
        return pod.endpoint.metrics if pod is not None else None

    def _scrape_all(self) -> None:
        now = self.now
        refreshed = self.controller.refreshed if self.controller.flow is not None else None
        for pod in self.pods:
            s = _stats(pod)
            pod.endpoint.metrics = MetricsSnapshot(
                engine="vllm",
                waiting=s.num_waiting,
                running=s.num_running,
                kv_usage=s.kv_cache_usage,
                block_size=s.block_size,
                num_gpu_blocks=s.num_gpu_blocks,
                scraped_at=now,
            )
            if refreshed is not None:
                refreshed(pod.endpoint.name)

    def _arrive(self, payload: tuple[WorkItem | RawItem, int, float]) -> None:
        item, rung, rung_start = payload
        now = self.now
        rid = f"r{next(self._ids)}"
        view = self.prepared.get(item)[0]
        record = RequestRecord(item_id=item.id, sent_s=now - rung_start)
        self.requests += 1
        controller = self.controller
        try:
            flight = controller.open(view, rid, tenant_headers(item), received=now)
        except NoCandidates:
            record.error = "http_503"
            self._done(rung, record)
            return
        if controller.flow is not None and not controller.admit_now(flight):
            self._hold(flight, item, record, rung)
            return
        self._send(controller.decide(flight), item, record, rung, now)

    def _hold(
        self, flight: ControlFlight, item: WorkItem | RawItem, record: RequestRecord, rung: int
    ) -> None:
        """Flow control holds the request: it is sent when released, or answered 429/503."""
        rid = flight.request_id
        arrival = self.now
        controller = self.controller

        def released() -> None:
            self._held.pop(rid, None)
            self._send(controller.decide(flight), item, record, rung, arrival)

        def refused(error: Overloaded) -> None:
            self._held.pop(rid, None)
            record.error = f"http_{error.status}"
            self._done(rung, record)

        held = controller.hold(flight, released, refused)
        if held is not None and held.queued:
            self._held[rid] = (held, record, rung)
            due = controller.next_expiry()
            if due is not None:
                self._push(due, _FLOW_TTL, None)

    def _send(
        self, attempt: Attempt | None, item: WorkItem | RawItem, record: RequestRecord, rung: int,
        arrival: float,
    ) -> None:  # fmt: skip
        """The decided request goes to its pod (``arrival``: when the client sent it)."""
        now = self.now
        view, seq, out_tokens, media = self.prepared.get(item)
        rid = attempt.flight.request_id if attempt is not None else ""
        controller = self.controller
        if attempt is None:
            record.error = "http_503"
            self._done(rung, record)
            return
        controller.started(attempt)
        pod = self._pod_of[attempt.endpoint]
        record.endpoint = attempt.endpoint
        record.predicted_ttft_s = attempt.decision.predicted_ttft_s
        if attempt.decision.encode is not None:
            record.encode, record.encode_reason = attempt.decision.encode
        flight = self._flights[rid] = _Flight(record, attempt, arrival, pod, rung)
        routing = attempt.headers
        if routing and view.api is Api.CHAT:
            stages = stages_with_spares(routing, self._registry.records())
            if stages.any:
                flight.item = item
                body, _ = self.prepared.body(item)
                released = functools.partial(controller.stage_done, attempt)
                work = self.orchestrator.prepare(body, view, stages, (), rid, released=released)
                self.tasks.spawn(work, lambda outcome: self._orchestrated(rid, outcome))
                return
        sim = SimRequest.from_sequence(rid, seq, out_tokens, view.cache_salt, media)
        self._push(now + self.delay, _RECEIVE, (pod, sim))

    # -- disaggregation: the legs before the decode pod -----------------------------------------

    def _orchestrated(self, rid: str, outcome: Outcome) -> None:
        """The orchestration ended: send the decode request, or answer 503 (``fallback: fail``)."""
        flight = self._flights.get(rid)
        if flight is None:
            return  # the rung's drain timeout ended it
        prepared, error = outcome
        if isinstance(error, StageFailed):
            del self._flights[rid]
            flight.record.error = "http_503"
            self.controller.finished(flight.attempt, ok=False)
            self._done(flight.rung, flight.record)
            return
        if error is not None:
            raise error
        assert isinstance(prepared, Prepared) and flight.item is not None
        if prepared.fallbacks and flight.rung == self._rung:
            self._fallbacks += 1
        view, seq, out_tokens, media = self.prepared.get(flight.item)
        flight.item = None
        transfer = _transfer_of(prepared.body)
        sim = SimRequest(
            rid, seq.token_ids, seq.mm_items, out_tokens, view.cache_salt,
            remote_prefill=transfer.remote_prefill, remote_encoded=transfer.remote_encoded, media=media,
        )  # fmt: skip
        wire = self._wire_s(flight.pod, transfer, sim)
        self._push(self.now + self.delay + wire, _RECEIVE, (flight.pod, sim))

    def _wire_s(self, pod: _Pod, transfer: Transfer, sim: SimRequest) -> float:
        kv_s, ec_s = transfer_times(pod.spec, pod.engine.profile)
        return transfer_seconds(
            transfer, len(sim.token_ids), sim.mm_items, kv_s_per_token=kv_s, ec_s_per_token=ec_s
        )

    def start_leg(self, leg: Leg) -> Pending[tuple[int, bytes]]:
        """Send ``leg`` to its pod; the answer is settled when it would arrive back. A host the
        fleet does not have refuses the connection, as a closed port would."""
        answer: Pending[tuple[int, bytes]] = Pending()
        pod = self._pod_of.get(leg.host)
        flight = self._flights.get(leg.request_id)
        if pod is None or flight is None or flight.item is None:
            self.tasks.settle(answer, error=ConnectionRefusedError(f"{leg.host}: no such pod"))
            return answer
        leg_id = f"{leg.request_id}~{leg.stage}{next(self._leg_ids)}"
        self._legs[leg_id] = _LegFlight(answer, pod, flight.rung)
        pod.legs += 1
        self._push(self.now + leg.timeout_s, _LEG_TIMEOUT, leg_id)
        body = msgspec.json.decode(leg.body)
        if pod.encoder is not None:
            _, parts = self.prepared.body(flight.item)
            items = _encode_items(body, parts)
            loads = self.prepared.payloads(flight.item)
            loaded = [loads[m.identity] for m in items if m.identity in loads]
            self._push(self.now + self.delay, _ENCODE, (leg_id, items, loaded))
            return answer
        view, seq, _, media = self.prepared.get(flight.item)
        try:
            transfer = _transfer_of(leg.body)
        except RequestError as exc:
            self._answer_leg(leg_id, 400, msgspec.json.encode({"error": {"message": str(exc)}}))
            return answer
        n_out = 1 if transfer.remote_decode else max(1, int(body.get("max_tokens") or 1))
        sim = SimRequest(
            leg_id, seq.token_ids, seq.mm_items, n_out, view.cache_salt,
            remote_prefill=transfer.remote_prefill, remote_encoded=transfer.remote_encoded, media=media,
        )  # fmt: skip
        self._legs[leg_id].prompt_tokens = len(seq.token_ids)
        self._push(self.now + self.delay + self._wire_s(pod, transfer, sim), _RECEIVE, (pod, sim))
        return answer

    def _encode(self, payload: tuple[str, list[MMItem], list[MediaPayload]]) -> None:
        """An encode leg reached its encode pod: it waits for a front-end worker to load and
        preprocess its media, then for the encoder (one leg at a time on each lane, in arrival
        order, as ``mmgate sim --mm-encoder-only`` serves them), then answers."""
        leg_id, items, media = payload
        leg = self._legs.get(leg_id)
        if leg is None:
            return
        pod = leg.pod
        assert pod.encoder is not None
        front_s, seconds = pod.encoder.work([(m.identity, m.length, m.modality.value) for m in items], media)
        fronts = pod.front_free_at
        worker = fronts.index(min(fronts))
        loaded = fronts[worker] = max(self.now, fronts[worker]) + front_s
        free = pod.encode_free_at
        lane = free.index(min(free))  # the lane free first (several with encoder data parallelism)
        start = max(loaded, free[lane])
        pod.encoder_s += seconds
        done = free[lane] = start + seconds
        triples = [(m.identity, m.modality.value, m.length) for m in items]
        host, _, port = pod.endpoint.name.rpartition(":")
        params = encoder_response_params(triples, host=host, port=int(port))
        self._push(
            done + self.delay, _ANSWER, (leg_id, 200, msgspec.json.encode({"ec_transfer_params": params}))
        )

    def _answer(self, payload: tuple[str, int, bytes]) -> None:
        self._answer_leg(*payload)

    def _answer_leg(self, leg_id: str, status: int, body: bytes) -> None:
        leg = self._legs.pop(leg_id, None)
        if leg is not None:
            self.tasks.settle(leg.answer, (status, body))

    def _leg_timeout(self, leg_id: str) -> None:
        """The leg's timeout passed first: the orchestration retries or falls back; the pod
        drops the work (the connection was closed)."""
        leg = self._legs.pop(leg_id, None)
        if leg is None:
            return
        if leg.pod.encoder is None:
            leg.pod.engine.abort(leg_id)
        self.tasks.settle(leg.answer, error=TimeoutError(f"{leg.pod.endpoint.name}: no answer in time"))

    def _prefilled(self, fin: Any) -> bool:
        """A prefill leg finished on its engine: answer it with the KV parameters."""
        leg = self._legs.get(fin.request_id)
        if leg is None:
            return False
        host, _, port = leg.pod.endpoint.name.rpartition(":")
        block_size = leg.pod.engine.block_size
        kv = prefill_response_params(
            engine_id=f"des-{leg.pod.index}", request_id=fin.request_id, host=host, port=int(port),
            block_ids=list(range(-(-leg.prompt_tokens // block_size))), num_tokens=leg.prompt_tokens,
        )  # fmt: skip
        self._answer_leg(fin.request_id, 200, msgspec.json.encode({"kv_transfer_params": kv}))
        return True

    def pod_reports(self) -> list[PodReport]:
        """Per pod: role, encoder work and cache counters, legs served (for tests and reports)."""
        out = []
        for pod in self.pods:
            s = _stats(pod)
            enc = pod.encoder
            out.append(
                PodReport(
                    pod.endpoint.name, pod.endpoint.endpoint.role,
                    pod.encoder_s, 0 if enc is None else enc.encoded_items,
                    s.encoder_cache_queries, s.encoder_cache_hits, pod.legs,
                    0.0 if enc is None else enc.load_s,
                )
            )  # fmt: skip
        return out

    def _receive(self, payload: tuple[_Pod, SimRequest]) -> None:
        """The pod's frontend preprocesses (processor cache, HF processor) before the engine sees it."""
        pod, sim = payload
        self._push(self.now + pod.engine.preprocess(sim, self.now), _ADD, payload)

    def _add(self, payload: tuple[_Pod, SimRequest]) -> None:
        pod, sim = payload
        try:
            pod.engine.add_request(sim, self.now)
        except ValueError as exc:
            if sim.request_id in self._legs:  # the pod answers the leg 400, as over HTTP
                error = msgspec.json.encode({"error": {"message": str(exc)}})
                self._push(self.now + self.delay, _ANSWER, (sim.request_id, 400, error))
                return
            flight = self._flights.pop(sim.request_id, None)
            if flight is not None:
                flight.record.error = "http_400"
                self.controller.finished(flight.attempt, ok=False)
                self._done(flight.rung, flight.record)
            return
        if not pod.busy:
            pod.busy = True
            self._push(self.now, _STEP, pod)

    def _step(self, pod: _Pod) -> None:
        now = self.now
        out = pod.pending
        if out is not None:
            pod.pending = None
            self._deliver(out, now)
        engine = pod.engine
        if not engine.has_work():
            pod.busy = False
            return
        out = engine.step(now)
        self.steps += 1
        if self.kv_feed is not None and out.events:  # published when the step ends, as vLLM does
            self._push(now + out.duration + self.delay, _KV, (pod, out.events))
        pod.encoder_s += out.encoder_seconds
        if out.duration > 0:
            pod.pending = out
            self._push(now + out.duration, _STEP, pod)
        elif out.first_token or out.finished:
            self._deliver(out, now)
            self._push(now + 1e-4, _STEP, pod)
        else:
            wake = getattr(engine, "next_event_time", None)
            later = wake(now) if callable(wake) else None
            self._push(later if later is not None and later > now else now + 1e-3, _STEP, pod)

    def _deliver(self, out: StepOutput, now: float) -> None:
        seen = now + self.delay
        if out.next_tokens:
            self._itl.append((out.duration, len(out.next_tokens)))
        for rid in out.first_token:
            self._push(seen, _FIRST, rid)
        for fin in out.finished:
            self._push(seen, _FINISH, fin)

    def _kv(self, payload: tuple[_Pod, Any]) -> None:
        """A step's KV events reach the gateway's index (precise systems only)."""
        pod, events = payload
        assert self.kv_feed is not None
        self.kv_feed.apply(pod.endpoint.name, events, self.now)

    def _first(self, rid: str) -> None:
        flight = self._flights.get(rid)
        if flight is None:
            return
        flight.record.ttft_s = self.now - flight.arrival
        self.controller.first_byte(flight.attempt, 200)

    def _finish(self, fin: Any) -> None:
        if self._prefilled(fin):
            return
        flight = self._flights.pop(fin.request_id, None)
        if flight is None:
            return
        rec = flight.record
        rec.e2e_s = self.now - flight.arrival
        rec.output_tokens = fin.output_tokens
        rec.prompt_tokens = fin.prompt_tokens
        rec.cached_tokens = fin.cached_tokens
        if rec.ttft_s is None:
            rec.ttft_s = rec.e2e_s
        controller = self.controller
        controller.usage(flight.attempt, Usage(fin.prompt_tokens, fin.output_tokens, fin.cached_tokens))
        controller.finished(flight.attempt, ok=True)
        self._done(flight.rung, rec)

    # -- rungs ------------------------------------------------------------------------------------

    def _done(self, rung: int, record: RequestRecord) -> None:
        if rung == self._rung:
            self._records.append(record)
            self._last_done = self.now
            self._open -= 1
            if self._progress_cb is not None:
                self._progress_cb(record)

    def run_rung(
        self,
        items: Callable[[], WorkItem | RawItem],
        rate: float,
        duration_s: float,
        ladder: Ladder,
        index: int,
        on_record: Callable[[RequestRecord], None] | None = None,
    ) -> RungResult:
        """Send one rung's arrivals, run until they all finish or the drain timeout passes."""
        offsets = arrival_times(rate, duration_s, ladder.arrival, ladder.seed * 1_000 + index)
        schedule = [(offset, items()) for offset in offsets]
        return self.run_schedule(schedule, rate, duration_s, ladder.drain_timeout_s, index, on_record)

    def run_schedule(
        self,
        schedule: Sequence[tuple[float, WorkItem | RawItem]],
        rate: float,
        duration_s: float,
        drain_timeout_s: float,
        index: int = 0,
        on_record: Callable[[RequestRecord], None] | None = None,
    ) -> RungResult:
        """Send ``schedule``'s items at their offsets (seconds from now; several tenants'
        arrivals merged, for instance), run until they all finish or ``drain_timeout_s`` after
        ``duration_s`` passes. ``rate`` labels the result."""
        start = self.now
        self._rung = index
        self._records = []
        self._open = len(schedule)
        self._last_done = start
        self._progress_cb = on_record
        self._itl = []
        self._fallbacks = 0
        before = _cache_totals(self.pods)
        for offset, item in schedule:
            self._push(start + offset, _ARRIVE, (item, index, start))
        deadline = start + duration_s + drain_timeout_s
        handlers: dict[int, Callable[[Any], None]] = {
            _ARRIVE: self._arrive,
            _RECEIVE: self._receive,
            _ADD: self._add,
            _STEP: self._step,
            _FIRST: self._first,
            _FINISH: self._finish,
            _ENCODE: self._encode,
            _ANSWER: self._answer,
            _LEG_TIMEOUT: self._leg_timeout,
            _KV: self._kv,
            _FLOW_TTL: self._flow_ttl,
        }
        events = self._events
        while events and self._open > 0:
            t, kind, _, payload = events[0]
            if t > deadline:
                break
            heapq.heappop(events)
            self.now = t
            if kind == _SCRAPE:
                self._scrape_all()
                self._push(t + self.scrape_s, _SCRAPE, None)
            else:
                handlers[kind](payload)
        if self._open > 0:
            self.now = max(self.now, deadline)
            self._abort_rung(index)
        span = max(self._last_done - start, duration_s)
        after = _cache_totals(self.pods)
        itl, self._itl = self._itl, []
        result = RungResult(
            self.system.name, rate, duration_s, span, self._records, after - before, mode="des"
        )
        result.itl_weighted = itl
        result.fallbacks = self._fallbacks
        self._rung = -2
        return result

    def _flow_ttl(self, _payload: Any) -> None:
        """A held request's TTL may have ended: flow control refuses those that did (503)."""
        self.controller.expire_held()

    def _abort_rung(self, rung: int) -> None:
        """Drain timeout: cancel what this rung still has in flight (a client timeout)."""
        for rid, (held, record, held_rung) in list(self._held.items()):
            if held_rung == rung:  # still held by flow control: the client gives up
                del self._held[rid]
                self.controller.withdraw(held)
                record.error = "timeout"
                self._done(rung, record)
        for rid, flight in list(self._flights.items()):
            if flight.rung != rung:
                continue
            flight.pod.engine.abort(rid)  # (a flight still in its legs is in no engine yet)
            del self._flights[rid]
            self.controller.finished(flight.attempt, ok=False)
            flight.record.error = "timeout"
            self._done(rung, flight.record)
        for leg_id, leg in list(self._legs.items()):
            if leg.rung == rung:
                del self._legs[leg_id]  # its orchestration is dropped with the flight
                if leg.pod.encoder is None:
                    leg.pod.engine.abort(leg_id)
        # Arrivals of this rung not yet sent: count them as timeouts too.
        kept = []
        for ev in self._events:
            if ev[1] == _ARRIVE and ev[3][1] == rung:
                self._done(rung, RequestRecord(item_id=ev[3][0].id, sent_s=ev[0] - ev[3][2], error="timeout"))
            else:
                kept.append(ev)
        heapq.heapify(kept)
        self._events = kept


_NO_HEADERS: dict[str, str] = {}


TENANT = "tenant:"


def tenant_headers(item: WorkItem | RawItem) -> dict[str, str]:
    """A workload item's flow-control headers: a ``group`` of ``tenant:NAME`` or
    ``tenant:NAME@OBJECTIVE`` (multi-tenant workloads) names its fairness id and objective."""
    group = getattr(item, "group", "")
    if not group.startswith(TENANT):
        return _NO_HEADERS
    tenant, _, objective = group.removeprefix(TENANT).partition("@")
    headers = {FAIRNESS_ID_HEADER: tenant}
    if objective:
        headers[OBJECTIVE_HEADER] = objective
    return headers


_TRANSFER_FIELDS = msgspec.json.Decoder(dict[str, Any])


def _transfer_of(body: bytes) -> Transfer:
    """What a leg's or decode request's transfer parameters ask of the pod (``RequestError`` for
    malformed ones, as the simulated pod reads them)."""
    doc = _TRANSFER_FIELDS.decode(body)
    return read_transfer(doc.get("kv_transfer_params"), doc.get("ec_transfer_params"))


def _encode_items(body: plan.Body, parts: dict[bytes, MMItem]) -> list[MMItem]:
    """The media items of an encode leg: the parts of its one user message, by their JSON."""
    out = []
    for message in body.get("messages") or ():
        for part in message.get("content") or () if isinstance(message, dict) else ():
            item = parts.get(msgspec.json.encode(part))
            if item is not None:
                out.append(item)
    return out


def _at_once(hook: Callable[[], None]) -> None:
    """The DES's deferral of PreRequest index updates: now (virtual time has no later moment
    that would be cheaper)."""
    hook()


def run_des(
    workload: Workload,
    systems: Sequence[System],
    ladder: Ladder,
    opts: DesOptions,
    *,
    replay: Sequence[RawItem] | None = None,
    progress: bool = True,
    log: Callable[[str], None] = print,
) -> list[RungResult]:
    """Every mmgate system over the ladder; peers are skipped (they cannot run in virtual time)."""
    results: list[RungResult] = []
    prepared: _Prepared | None = None
    with RungProgress(progress) as bar:
        for system in systems:
            if system.is_peer:
                log(f"skipping {system.name}: peer routers run only in HTTP mode")
                continue
            sim = Simulation(system, opts, prepared)
            prepared = sim.prepared
            stream = iter(itertools.cycle(replay)) if replay is not None else workload.stream()

            def next_item(it: Any = stream) -> WorkItem | RawItem:
                item: WorkItem | RawItem = next(it)
                return item

            for index, rate, duration, warmup in ladder.rungs():
                label = f"{system.name:<18} {'warm-up' if warmup else 'rate'} {rate:g}/s (DES)"
                task = bar.add(label, int(rate * duration))
                failed = 0

                def tick(rec: RequestRecord, task: Any = task) -> None:
                    nonlocal failed
                    failed += rec.error is not None
                    bar.done(task, failed)

                rung = sim.run_rung(next_item, rate, duration, ladder, index, tick if progress else None)
                if not warmup:
                    results.append(rung)
    return results
