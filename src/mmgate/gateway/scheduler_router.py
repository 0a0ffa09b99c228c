"""The :class:`~mmgate.gateway.routing.Router` over mmgate's llm-d-compatible :class:`Scheduler`.

The scheduler keeps in-flight counters on :class:`EndpointState` objects, so this adapter keeps
one state per endpoint for the endpoint's whole life, refreshes its metrics snapshot from the data
layer before each decision (a reference, not a copy), and drops it when the endpoint leaves.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Mapping, Sequence

from mmgate.datalayer.endpoints import EndpointRecord
from mmgate.gateway.routing import Decision, NoEndpoint
from mmgate.request.view import RequestView
from mmgate.scheduling import ROLE_LABEL, EndpointState, NoEndpointsError, Scheduler, SchedulingRequest
from mmgate.scheduling.keys import ENCODER_CACHE_MATCH, PREFIX_MATCH, TOKENIZED_PROMPT
from mmgate.scheduling.types import SchedulingResult
from mmgate.tokens import PricingConfig, price

PREFILLER_HEADER = "x-prefiller-host-port"
ENCODERS_HEADER = "x-encoder-hosts-ports"
SECONDARY_PROFILES = ("encode", "prefill")
"""Profiles whose targets do work for the request besides the primary (decode) target."""

SWEEP_EVERY_S = 30.0
LOST_AFTER_S = 900.0
"""A request whose end was never reported (a lost callback) stops counting as load after this."""


class _Handle:
    __slots__ = ("request", "result", "state")

    def __init__(self, request: SchedulingRequest, result: SchedulingResult, state: EndpointState) -> None:
        self.request = request
        self.result = result
        self.state = state


class SchedulerRouter:
    def __init__(
        self,
        scheduler: Scheduler,
        *,
        pricing: PricingConfig | None = None,
        clock: Callable[[], float] = time.monotonic,
        lost_after_s: float = LOST_AFTER_S,
    ) -> None:
        self.scheduler = scheduler
        self.lost_after_s = lost_after_s
        self._last_sweep = clock()
        # Used only for the x-mmgate-request-tokens header when no token-producer is configured.
        self.pricing = pricing or PricingConfig()
        self.clock = clock
        self._states: dict[str, EndpointState] = {}
        self._seq = itertools.count()

    def state_of(self, record: EndpointRecord) -> EndpointState:
        state = self._states.get(record.name)
        endpoint = record.endpoint
        if state is None or state.url != endpoint.url or state.role != endpoint.role:
            labels = dict(endpoint.labels)
            if endpoint.role:
                labels[ROLE_LABEL] = endpoint.role
            fresh = EndpointState(name=record.name, url=endpoint.url, role=endpoint.role, labels=labels)
            if state is not None:
                fresh.inflight = state.inflight
            state = self._states[record.name] = fresh
        state.metrics = record.metrics
        return state

    def decide(
        self,
        view: RequestView,
        candidates: Sequence[EndpointRecord],
        now: float,
        *,
        request_id: str,
        headers: Mapping[str, str],
        debug: bool,
    ) -> Decision:
        if now - self._last_sweep >= SWEEP_EVERY_S:
            self._last_sweep = now
            self.scheduler.sweep(now, self.lost_after_s)
        states = [self.state_of(r) for r in candidates]
        # The scheduler tracks in-flight requests by id; clients choose x-request-id, so two
        # concurrent requests may share one. A per-attempt suffix keeps their accounting apart.
        request = SchedulingRequest(view, f"{request_id}#{next(self._seq)}", headers, debug=debug)
        try:
            result = self.scheduler.schedule(request, states, now)
            target = result.target
        except NoEndpointsError as exc:
            raise NoEndpoint(str(exc)) from None
        decision = Decision(endpoint=target.name, handle=_Handle(request, result, target))
        self._describe(decision, request, result, view)
        decision.pre_request = lambda: self.scheduler.pre_request(request, result, self.clock())
        return decision

    def _describe(
        self, decision: Decision, request: SchedulingRequest, result: SchedulingResult, view: RequestView
    ) -> None:
        """Fill the reporting fields from what the producers left in the request's data bag."""
        name = decision.endpoint
        tokenized = request.get(TOKENIZED_PROMPT)
        if tokenized is not None:
            by_modality: dict[str, int] = {}
            for item in tokenized.media:
                by_modality[str(item.modality)] = by_modality.get(str(item.modality), 0) + item.length
            by_modality["text"] = tokenized.total_tokens - tokenized.media_tokens
            decision.request_tokens = tokenized.total_tokens
        else:
            pricing = price(view, self.pricing)
            by_modality = {str(m): n for m, n in pricing.by_modality.items()}
            by_modality["text"] = pricing.text_tokens
            decision.request_tokens = pricing.total_tokens
        decision.tokens_by_modality = {m: n for m, n in by_modality.items() if n}
        encoder = request.get(ENCODER_CACHE_MATCH)
        if encoder is not None and encoder.total_items:
            items: dict[str, int] = {}
            for modality in encoder.modalities:
                items[str(modality)] = items.get(str(modality), 0) + 1
            decision.encoder_items = items
            hits = encoder.matched_items.get(name, 0)
            # Match info is counted per request, not per item; attribute hits to the modality
            # when the request has one (the common case), else in item order.
            left = hits
            for modality, count in items.items():
                take = min(count, left)
                decision.encoder_hits[modality] = take
                left -= take
        prefix = request.get(PREFIX_MATCH)
        if prefix is not None and prefix.total_blocks:
            decision.prefix_match = prefix.ratio(name)
        prefill = result.targets_of("prefill")
        if prefill:
            decision.headers[PREFILLER_HEADER] = prefill[0].name
        encoders = result.targets_of("encode")
        if encoders:
            decision.headers[ENCODERS_HEADER] = ",".join(e.name for e in encoders)
        if request.debug:
            decision.scores = _scores(result)

    def started(self, decision: Decision) -> None:
        handle = decision.handle
        assert isinstance(handle, _Handle)
        now = self.clock()
        self.scheduler.on_started(handle.request, handle.state, now)
        # E/PD and E/P/D: the encode and prefill pods work for this request too, so they carry
        # its load until it ends (llm-d counts only the primary target).
        for profile in SECONDARY_PROFILES:
            for state in handle.result.targets_of(profile):
                if state is not handle.state:
                    self.scheduler.on_started(handle.request, state, now, profile=profile)

    def first_token(self, decision: Decision) -> None:
        handle = decision.handle
        assert isinstance(handle, _Handle)
        self.scheduler.on_first_token(handle.request.request_id, self.clock())

    def finished(self, decision: Decision, *, ok: bool) -> None:
        handle = decision.handle
        assert isinstance(handle, _Handle)
        if ok:
            self.scheduler.on_finished(handle.request.request_id, self.clock())
        else:
            self.scheduler.on_failed(handle.request.request_id, self.clock())

    def forget(self, endpoint: str) -> None:
        self._states.pop(endpoint, None)
        self.scheduler.remove_endpoint(endpoint)


def _scores(result: SchedulingResult) -> dict[str, dict[str, float]]:
    """Per endpoint: each scorer's raw score and the weighted ``total`` of the primary profile."""
    primary = result.profiles.get(result.primary_profile)
    if primary is None:
        return {}
    out: dict[str, dict[str, float]] = {}
    for i, endpoint in enumerate(primary.candidates):
        row = {name: values[i] for name, values in (primary.by_scorer or {}).items()}
        row["total"] = primary.scores[i]
        out[endpoint.name] = row
    return out
