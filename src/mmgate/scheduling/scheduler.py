"""The scheduler: runs the plugins for one decision, mirroring llm-d's EPP.

One decision: producers run in dependency order over all candidates, then the profile handler
picks profiles to run, each profile runs Filter → Score → Pick (:mod:`mmgate.scheduling.profile`),
and the handler turns the profile results into a :class:`SchedulingResult`. Ties are broken at
random with the scheduler's seeded RNG.

Everything here is synchronous and clock-free (``now`` is an argument) so the discrete-event
benchmark can run the same scheduler in virtual time. PreRequest hooks come in two kinds: those
whose effect the request needs (routing headers) run before it is sent
(:meth:`Scheduler.pre_request_before_send`); the rest (index updates) may run after it was sent,
off the request path (:meth:`Scheduler.pre_request_deferred`). What a started request holds is
kept by :class:`~mmgate.scheduling.inflight.StartedRequests`.

Per-plugin processing time is sampled: with a timer, one decision in :data:`TIMED_EVERY` times its
plugins. Reading the clock around every plugin call cost 4-9% of the whole in-process hot path of a
text request (callgrind, ``bench/scripts/hotpath_trees.py --instructions``); a sample of one in 16
gives the same distribution at a sixteenth of the cost. The histogram's counts are then timed
calls, not all calls (``mmgate_decision_latency_seconds`` counts every decision).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from time import perf_counter
from typing import Any

from mmgate.scheduling.contracts import EndpointAware, Plugin, PluginTimer, Producer, ProfileHandler
from mmgate.scheduling.inflight import StartedRequests
from mmgate.scheduling.lifecycle import PreRequest, RequestLifecycle
from mmgate.scheduling.profile import Profile, no_target
from mmgate.scheduling.types import (
    EndpointState,
    NoEndpointsError,
    ProfileResult,
    SchedulingRequest,
    SchedulingResult,
)

_MAX_PROFILE_ROUNDS = 16  # a handler runs a few profiles; more rounds means it loops
TIMED_EVERY = 16  # with a plugin timer: one decision in this many times its plugins


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
        plugin_timer: PluginTimer | None = None,
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
        self._endpoint_aware = [p for p in every if isinstance(p, EndpointAware)]
        primary = _primary_name(profiles) if profiles else ""
        self.started = StartedRequests([p for p in every if isinstance(p, RequestLifecycle)], primary)
        self._one_profile = (
            next(iter(profiles.items())) if len(profiles) == 1 and handler.runs_one_profile() else None
        )
        self._producer_times: list[Callable[[float], None]] | None = None
        self._until_timed = 0  # decisions before the next timed one (with a timer)
        if plugin_timer is not None:
            self._producer_times = [plugin_timer("producer", p) for p in producers]
            for profile in profiles.values():
                profile.time_plugins(plugin_timer)

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
        times = self._producer_times
        timed = False
        if times is not None:
            self._until_timed -= 1
            if self._until_timed < 0:
                self._until_timed = TIMED_EVERY - 1
                timed = True
        if not timed:
            for producer in self.producers:
                producer.produce(request, endpoints)
        else:
            assert times is not None
            for producer, seconds in zip(self.producers, times, strict=True):
                started = perf_counter()
                producer.produce(request, endpoints)
                seconds(perf_counter() - started)
        handler = self.handler
        profiles = self.profiles
        if self._one_profile is not None:
            name, profile = self._one_profile
            only = profile.run(request, endpoints, timed)
            if only is None or not only.targets:
                raise no_target(name)
            return SchedulingResult({name: only}, name)
        results: dict[str, ProfileResult | None] = {}
        for _ in range(_MAX_PROFILE_ROUNDS):
            names = handler.pick_profiles(request, profiles, results)
            if not names:
                break
            for name in names:
                results[name] = profiles[name].run(request, endpoints, timed)
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

    # -- lifecycle: what started requests hold (mmgate.scheduling.inflight) ----------------------

    def on_started(
        self, request: SchedulingRequest, endpoint: EndpointState, now: float, *, profile: str | None = None
    ) -> None:
        """The request is being sent to ``endpoint`` (:meth:`StartedRequests.on_started`)."""
        self.started.on_started(request, endpoint, now, profile=profile)

    def start(
        self,
        request: SchedulingRequest,
        result: SchedulingResult,
        now: float,
        *,
        target: EndpointState | None = None,
    ) -> None:
        """The request is being sent: every profile's targets carry its load
        (:meth:`StartedRequests.start`)."""
        self.started.start(request, result, now, target=target)

    def on_first_token(self, request_id: str, now: float) -> None:
        """The first response chunk arrived (:meth:`StartedRequests.on_first_token`)."""
        self.started.on_first_token(request_id, now)

    def on_stage_done(self, request_id: str, endpoint: str, now: float) -> None:
        """A stage pod's legs ended (:meth:`StartedRequests.on_stage_done`)."""
        self.started.on_stage_done(request_id, endpoint, now)

    def on_finished(self, request_id: str, now: float) -> None:
        """The response ended, successfully or not, after streaming started."""
        self.started.on_finished(request_id, now)

    def on_failed(self, request_id: str, now: float) -> None:
        """The attempt failed before the first byte; releases everything the request held."""
        self.started.on_finished(request_id, now)

    def sweep(self, now: float, older_than_s: float) -> int:
        """Release requests never finished (:meth:`StartedRequests.sweep`); returns how many."""
        return self.started.sweep(now, older_than_s)

    @property
    def active_requests(self) -> int:
        return len(self.started)

    # -- endpoints ------------------------------------------------------------------------------

    def remove_endpoint(self, name: str) -> None:
        """The data layer dropped an endpoint: forget every per-endpoint index entry for it."""
        for plugin in self._endpoint_aware:
            plugin.remove_endpoint(name)


def _primary_name(profiles: dict[str, Profile]) -> str:
    if len(profiles) == 1:
        return next(iter(profiles))
    return "decode" if "decode" in profiles else next(iter(profiles))
