"""The plugin kinds and the scheduler that runs them, mirroring llm-d's EPP.

One decision: producers run in dependency order over all candidates, then the profile handler
picks profiles to run, each profile runs Filter → Score → Pick, and the handler turns the
profile results into a :class:`SchedulingResult`. Scores are clamped to [0, 1], multiplied by the
scorer's weight and summed; ties are broken at random with the scheduler's seeded RNG.

Everything here is synchronous and clock-free (``now`` is an argument) so the discrete-event
benchmark can run the same scheduler in virtual time. PreRequest hooks come in two kinds: those
whose effect the request needs (routing headers) run before it is sent
(:meth:`Scheduler.pre_request_before_send`); the rest (index updates) may run after it was sent,
off the request path (:meth:`Scheduler.pre_request_deferred`).
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, TypeVar

import msgspec

from mmgate.datalayer.index.store import AffinityStore, IndexProvider, MemoryIndexes
from mmgate.scheduling._weights import add_weighted, weighted
from mmgate.scheduling.types import (
    DataKey,
    EndpointState,
    NoEndpointsError,
    ProfileResult,
    SchedulingRequest,
    SchedulingResult,
)


class NoParams(msgspec.Struct, forbid_unknown_fields=True):
    """For plugins that take no parameters."""


ParamsT = TypeVar("ParamsT", bound=msgspec.Struct)


class PluginHandle:
    """What a plugin may use at construction: the shared RNG, other plugins by name, the
    gateway-wide defaults from the ``mmgate:`` section (``pricing_family``: ``mmgate.pricing.family``,
    the family ``token-producer`` prices with when its own parameters name none;
    ``refuse_unserved_modalities``: ``mmgate.validation.modalities``, whether a modality the served
    family cannot take is a 400), and where affinity indexes come from (``indexes``: in memory
    unless ``mmgate.sharedIndex`` makes them shared; reads never wait on I/O)."""

    def __init__(
        self,
        rng: random.Random,
        *,
        pricing_family: str | None = None,
        refuse_unserved_modalities: bool = True,
        indexes: IndexProvider | None = None,
        kv_blocks: AffinityStore[Any] | None = None,
    ) -> None:
        self.rng = rng
        self.pricing_family = pricing_family
        self.refuse_unserved_modalities = refuse_unserved_modalities
        self.indexes: IndexProvider = indexes if indexes is not None else MemoryIndexes()
        self.kv_blocks = kv_blocks  # the pods' KV-event block index (None: not subscribed)
        self.plugins: dict[str, Plugin[Any]] = {}

    def plugin(self, name: str) -> Plugin[Any] | None:
        return self.plugins.get(name)


class Plugin(Generic[ParamsT]):
    """Base of every plugin, generic over its parameters struct.

    A plugin class names its llm-d type in ``type_name`` (deprecated spellings in ``aliases``) and
    its parameters as the type argument, ``class TokenLoadScorer(Scorer[TokenLoadParams])``.
    ``Params`` (the struct the registry decodes a config's ``parameters`` into) is taken from that
    argument, so what is decoded and what mypy sees as ``self.params`` cannot drift apart.
    """

    type_name: ClassVar[str] = ""
    aliases: ClassVar[tuple[str, ...]] = ()
    Params: ClassVar[type[msgspec.Struct]] = NoParams

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for base in cls.__dict__.get("__orig_bases__", ()):
            for arg in getattr(base, "__args__", ()):
                if isinstance(arg, type) and issubclass(arg, msgspec.Struct):
                    cls.Params = arg

    def __init__(self, name: str, params: ParamsT, handle: PluginHandle) -> None:
        self.name = name
        self.params: ParamsT = params
        self.handle = handle

    def produces(self) -> tuple[DataKey[Any], ...]:
        return ()

    def consumes(self) -> tuple[DataKey[Any], ...]:
        """Data this plugin needs; a default producer is created if none is configured."""
        return ()

    def consumes_optional(self) -> tuple[DataKey[Any], ...]:
        """Data used when present: orders producers but never creates one."""
        return ()

    def resolve(self, plugins: Mapping[str, Plugin[Any]]) -> None:
        """Called once every configured plugin exists, to look up the ones this plugin names
        (raise ``ValueError`` naming the parameter when one is missing or of the wrong kind)."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"


class Producer(Plugin[ParamsT]):
    """Computes per-request data (llm-d DataProducer) before any profile runs."""

    def own_keys(self, key: DataKey[Any]) -> tuple[DataKey[Any], ...]:
        """``key``, plus its name-scoped twin when the instance is named other than its type."""
        return (key,) if self.name == self.type_name else (key, key.scoped(self.name))

    def produce(self, request: SchedulingRequest, endpoints: Sequence[EndpointState]) -> None:
        raise NotImplementedError


class Filter(Plugin[ParamsT]):
    def filter(self, request: SchedulingRequest, endpoints: list[EndpointState]) -> list[EndpointState]:
        raise NotImplementedError


class Scorer(Plugin[ParamsT]):
    """Returns one score per endpoint, aligned with ``endpoints``; the framework clamps to [0, 1]."""

    def score(self, request: SchedulingRequest, endpoints: list[EndpointState]) -> list[float]:
        raise NotImplementedError


class Picker(Plugin[ParamsT]):
    """Chooses targets (best first) among scored candidates."""

    def pick(self, endpoints: list[EndpointState], scores: list[float]) -> list[EndpointState]:
        raise NotImplementedError


class ProfileHandler(Plugin[ParamsT]):
    def stage_profiles(self) -> Mapping[str, str]:
        """Profiles that pick a pod for a stage other than the primary one, by stage name
        (``encode``, ``prefill``): the build gives each a default routing-header handler."""
        return {}

    def runs_one_profile(self) -> bool:
        """True when the handler runs the only profile once and makes it the primary one: the
        scheduler then skips the pick/process protocol, which would give the same result."""
        return False

    def pick_profiles(
        self,
        request: SchedulingRequest,
        profiles: Mapping[str, Profile],
        results: Mapping[str, ProfileResult | None],
    ) -> list[str]:
        """Profiles to run next; an empty list ends the cycle."""
        raise NotImplementedError

    def process_results(
        self, request: SchedulingRequest, results: dict[str, ProfileResult | None]
    ) -> SchedulingResult:
        raise NotImplementedError


class PreRequest:
    """Mixed into a plugin that runs after the decision (llm-d PreRequest): to record where
    content went, or to set the routing headers the request must carry. The hooks are
    capabilities, not kinds: one plugin may have several.

    ``before_send`` says which: True for hooks whose effect the upstream request needs (they set
    headers with :meth:`SchedulingRequest.set_upstream_header` and must run before it is sent);
    False for hooks that only update indexes, which callers may run after sending.
    """

    before_send: ClassVar[bool] = False
    routing_header: ClassVar[str] = ""
    """The header a ``before_send`` hook sets, if any (the build adds a default handler for a
    disaggregated stage only when no plugin sets its header)."""

    def pre_request(self, request: SchedulingRequest, result: SchedulingResult, now: float) -> None:
        raise NotImplementedError


class RequestLifecycle:
    """Mixed into a plugin that follows a request after it is sent: in-flight accounting (llm-d's
    ResponseBody hooks)."""

    def on_started(
        self, request: SchedulingRequest, endpoint: EndpointState, profile: str, now: float
    ) -> None:
        pass

    def on_first_token(self, request: SchedulingRequest, now: float) -> None:
        pass

    def on_stage_done(self, request: SchedulingRequest, endpoint: EndpointState, now: float) -> None:
        """A stage pod (encode, prefill) finished its legs of the request before the first token
        (:meth:`Scheduler.on_stage_done`): what it held for the request may go."""

    def on_finished(self, request: SchedulingRequest, now: float) -> None:
        pass


class EndpointAware:
    """Mixed into a plugin that keeps per-endpoint state that must go when the endpoint goes."""

    def remove_endpoint(self, name: str) -> None:
        raise NotImplementedError


_MAX_PROFILE_ROUNDS = 16  # a handler runs a few profiles; more rounds means it loops


@dataclass(slots=True)
class WeightedScorer:
    scorer: Scorer[Any]
    weight: float


class Profile:
    """A named Filter → Score → Pick pipeline."""

    def __init__(
        self, name: str, filters: list[Filter[Any]], scorers: list[WeightedScorer], picker: Picker[Any]
    ) -> None:
        self.name = name
        self.filters = filters
        self.scorers = scorers
        self.picker = picker

    def run(self, request: SchedulingRequest, endpoints: Sequence[EndpointState]) -> ProfileResult | None:
        candidates = list(endpoints)
        for f in self.filters:
            if not candidates:
                break
            candidates = f.filter(request, candidates)
        if not candidates:
            return None
        n = len(candidates)
        totals: list[float] | None = None
        by_scorer: dict[str, list[float]] | None = {} if request.debug else None
        for ws in self.scorers:
            raw = ws.scorer.score(request, candidates)
            if len(raw) != n:
                raise ValueError(f"scorer {ws.scorer.name!r} gave {len(raw)} scores for {n} endpoints")
            # Clamped, weighted and summed in scorer order (mmgate.scheduling._weights, compiled).
            totals = weighted(raw, ws.weight) if totals is None else add_weighted(totals, raw, ws.weight)
            if by_scorer is not None:
                by_scorer[ws.scorer.name] = list(raw)
        if totals is None:
            totals = [0.0] * n
        return ProfileResult(self.picker.pick(candidates, totals), candidates, totals, by_scorer)


class Scheduler:
    """The endpoint picker. Build it with :func:`mmgate.scheduling.build_scheduler`.

    Call order for one request::

        result = scheduler.schedule(req, endpoints, now)       # pure decision
        scheduler.pre_request_before_send(req, result, now)    # routing headers for the request
        scheduler.start(req, result, now)                      # when sent: load on every stage's pod
        scheduler.pre_request_deferred(req, result, now)       # index updates, may run off the hot path
        ... scheduler.on_first_token(req.request_id, t1) ... scheduler.on_finished(req.request_id, t2)

    (:meth:`pre_request` runs both kinds of hooks at once.) On a retry before the first byte call
    :meth:`on_failed` then :meth:`on_started` with the next endpoint (``result.primary.ranked()``
    gives the order), or schedule again.
    """

    def __init__(
        self,
        *,
        producers: list[Producer[Any]],
        profiles: dict[str, Profile],
        handler: ProfileHandler[Any],
        plugins: dict[str, Plugin[Any]],
        rng: random.Random,
        metrics_staleness_s: float = float("inf"),
    ) -> None:
        self.producers = producers
        self.profiles = profiles
        self.handler = handler
        self.plugins = plugins
        self.rng = rng
        self.metrics_staleness_s = metrics_staleness_s
        every = list(plugins.values())
        hooks = [p for p in every if isinstance(p, PreRequest)]
        self._before_send = [p for p in hooks if p.before_send]
        self._deferred = [p for p in hooks if not p.before_send]
        self._lifecycle = [p for p in every if isinstance(p, RequestLifecycle)]
        self._endpoint_aware = [p for p in every if isinstance(p, EndpointAware)]
        self._active: dict[str, _Active] = {}
        self._primary = _primary_name(self) if profiles else ""
        self._one_profile = (
            next(iter(profiles.items())) if len(profiles) == 1 and handler.runs_one_profile() else None
        )

    @property
    def has_deferred_pre_request(self) -> bool:
        """Whether :meth:`pre_request_deferred` has any hook to run (callers may skip scheduling it)."""
        return bool(self._deferred)

    @property
    def has_pre_request_before_send(self) -> bool:
        """Whether :meth:`pre_request_before_send` has any hook to run (callers may skip the call)."""
        return bool(self._before_send)

    # -- the decision -------------------------------------------------------------------------

    def schedule(
        self, request: SchedulingRequest, endpoints: Sequence[EndpointState], now: float
    ) -> SchedulingResult:
        """Choose endpoints for ``request``. Raises :class:`NoEndpointsError` when none fits."""
        if not endpoints:
            raise NoEndpointsError("no endpoints are available")
        request.now = now
        request.staleness_s = self.metrics_staleness_s
        for producer in self.producers:
            producer.produce(request, endpoints)
        handler = self.handler
        profiles = self.profiles
        if self._one_profile is not None:
            name, profile = self._one_profile
            only = profile.run(request, endpoints)
            if only is None or not only.targets:
                raise no_target(name)
            return SchedulingResult({name: only}, name)
        results: dict[str, ProfileResult | None] = {}
        for _ in range(_MAX_PROFILE_ROUNDS):
            names = handler.pick_profiles(request, profiles, results)
            if not names:
                break
            for name in names:
                results[name] = profiles[name].run(request, endpoints)
        else:
            raise RuntimeError(f"profile handler {handler.name!r} never stopped picking profiles")
        return handler.process_results(request, results)

    def pre_request(self, request: SchedulingRequest, result: SchedulingResult, now: float) -> None:
        """Run every PreRequest hook: the routing-header ones, then the index updates."""
        self.pre_request_before_send(request, result, now)
        self.pre_request_deferred(request, result, now)

    def pre_request_before_send(
        self, request: SchedulingRequest, result: SchedulingResult, now: float
    ) -> None:
        """The hooks the upstream request depends on (routing headers): run before sending it."""
        for plugin in self._before_send:
            plugin.pre_request(request, result, now)

    def pre_request_deferred(self, request: SchedulingRequest, result: SchedulingResult, now: float) -> None:
        """The hooks that only update indexes: safe to run after the request was sent."""
        for plugin in self._deferred:
            plugin.pre_request(request, result, now)

    # -- lifecycle: in-flight accounting --------------------------------------------------------

    def on_started(
        self, request: SchedulingRequest, endpoint: EndpointState, now: float, *, profile: str | None = None
    ) -> None:
        """The request is being sent to ``endpoint`` (for ``profile``, default the primary one)."""
        held = self._active.get(request.request_id)
        if held is None:
            held = self._active[request.request_id] = _Active(request, now)
        prof = profile or self._primary
        (held.serving if prof == self._primary else held.stages).append(endpoint)
        endpoint.inflight.requests += 1
        for plugin in self._lifecycle:
            plugin.on_started(request, endpoint, prof, now)

    def start(
        self,
        request: SchedulingRequest,
        result: SchedulingResult,
        now: float,
        *,
        target: EndpointState | None = None,
    ) -> None:
        """The request is being sent: every profile's targets carry its load.

        In E/PD and E/P/D the encode and prefill pods work for the request too, so they are
        charged with it (for their profile) besides the primary target, until its own legs end
        (:meth:`on_stage_done`) or else the first token (:meth:`on_first_token`); a pod chosen by
        two profiles is charged once. llm-d charges
        only the primary target.
        """
        if target is None:
            target = result.target
        self.on_started(request, target, now)
        profiles = result.profiles
        if len(profiles) == 1:
            return
        primary = result.primary_profile
        for name, profile in profiles.items():
            if name == primary or profile is None:
                continue
            for endpoint in profile.targets:
                if endpoint is not target:
                    self.on_started(request, endpoint, now, profile=name)

    def on_first_token(self, request_id: str, now: float) -> None:
        """The first response chunk arrived: prefill is done, and so is every stage leg (the
        decode pod answers only after the encode and prefill legs returned, in the sidecar as in
        the gateway), so the stage pods stop counting the request once the plugins saw it."""
        held = self._active.get(request_id)
        if held is None:
            return
        for plugin in self._lifecycle:
            plugin.on_first_token(held.request, now)
        if held.stages:  # none in an aggregated fleet: nothing to release
            _release(held.stages)

    def on_stage_done(self, request_id: str, endpoint: str, now: float) -> None:
        """Every leg of the request on the stage pod ``endpoint`` has ended: it stops counting
        the request now rather than at the first token. Only a transport that sends the legs
        itself knows this (the gateway-orchestrated mode; a sidecar's legs are out of sight, so
        there the first token releases every stage pod). Not a stage pod of the request: nothing."""
        held = self._active.get(request_id)
        if held is None:
            return
        for i, ep in enumerate(held.stages):
            if ep.name == endpoint:
                del held.stages[i]
                if ep.inflight.requests > 0:
                    ep.inflight.requests -= 1
                for plugin in self._lifecycle:
                    plugin.on_stage_done(held.request, ep, now)
                return

    def on_finished(self, request_id: str, now: float) -> None:
        """The response ended (successfully or not, after streaming started)."""
        held = self._active.pop(request_id, None)
        if held is None:
            return
        _release(held.serving)
        if held.stages:
            _release(held.stages)
        for plugin in self._lifecycle:
            plugin.on_finished(held.request, now)

    def on_failed(self, request_id: str, now: float) -> None:
        """The attempt failed before the first byte; releases everything the request held."""
        self.on_finished(request_id, now)

    def sweep(self, now: float, older_than_s: float) -> int:
        """Release requests started more than ``older_than_s`` ago that were never finished (a
        lost callback must not hold load forever; llm-d has a janitor for the same). Returns how
        many were released."""
        stale = [rid for rid, held in self._active.items() if now - held.started > older_than_s]
        for rid in stale:
            self.on_finished(rid, now)
        return len(stale)

    @property
    def active_requests(self) -> int:
        return len(self._active)

    # -- endpoints ------------------------------------------------------------------------------

    def remove_endpoint(self, name: str) -> None:
        """The data layer dropped an endpoint: forget every per-endpoint index entry for it."""
        for plugin in self._endpoint_aware:
            plugin.remove_endpoint(name)


class _Active:
    """A started request: the pods it holds, the serving one(s) until it ends, the stage pods
    (encode, prefill) until its first token."""

    __slots__ = ("request", "serving", "stages", "started")

    def __init__(self, request: SchedulingRequest, started: float) -> None:
        self.request = request
        self.started = started
        self.serving: list[EndpointState] = []
        self.stages: list[EndpointState] = []


def _release(held: list[EndpointState]) -> None:
    for ep in held:
        if ep.inflight.requests > 0:
            ep.inflight.requests -= 1
    held.clear()


def _primary_name(scheduler: Scheduler) -> str:
    if len(scheduler.profiles) == 1:
        return next(iter(scheduler.profiles))
    return "decode" if "decode" in scheduler.profiles else next(iter(scheduler.profiles))


def no_target(profile: str) -> NoEndpointsError:
    return NoEndpointsError(f"no endpoint passed the filters of profile {profile!r}")
