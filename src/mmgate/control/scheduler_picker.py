"""The :class:`~mmgate.control.decision.EndpointPicker` over mmgate's llm-d-compatible :class:`Scheduler`.

The scheduler keeps in-flight counters on :class:`EndpointState` objects, so this adapter keeps
one state per endpoint for the endpoint's whole life, refreshes its metrics snapshot from the
endpoint record before each decision (a reference, not a copy), and drops it when the endpoint
leaves. Routing headers come from the scheduler's PreRequest hooks that run before sending
(``prefill-header-handler``, ``encoder-header-handler``): the topology is the config's business.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType

from mmgate.control.decision import Decision, NoEndpoint
from mmgate.datalayer.endpoints import Endpoint, EndpointRecord
from mmgate.request.view import RequestView
from mmgate.scheduling import ROLE_LABEL, EndpointState, NoEndpointsError, Scheduler, SchedulingRequest
from mmgate.scheduling.keys import (
    ENCODE_CHOICE,
    ENCODER_CACHE_MATCH,
    PREDICTED_TTFT,
    PREFIX_MATCH,
    TOKENIZED_PROMPT,
    EncodeChoice,
    EncoderCacheMatch,
    PredictedTTFT,
    PrefixMatch,
    TokenizedPrompt,
)
from mmgate.scheduling.types import SchedulingResult
from mmgate.tokens import PricingConfig, price

SWEEP_EVERY_S = 30.0
LOST_AFTER_S = 900.0
"""A request whose end was never reported (a lost callback) stops counting as load after this."""


class _Handle:
    """What the lifecycle calls need of a decision; its bound :meth:`pre_request` is the
    decision's deferred hook work (one object per decision, not a partial and its argument
    tuple and keyword dict)."""

    __slots__ = ("picker", "request", "result", "target")

    def __init__(
        self,
        picker: SchedulerPicker,
        request: SchedulingRequest,
        result: SchedulingResult,
        target: EndpointState,
    ) -> None:
        self.picker = picker
        self.request = request
        self.result = result
        self.target = target

    def pre_request(self) -> None:
        picker = self.picker
        picker.scheduler.pre_request_deferred(self.request, self.result, picker.clock())


class SchedulerPicker:
    """``describe=False`` skips the reporting fields of a decision (tokens by modality, encoder
    and prefix matches, scores): for callers that report nothing, such as the discrete-event
    benchmark, they are work without a reader."""

    def __init__(
        self,
        scheduler: Scheduler,
        *,
        pricing: PricingConfig | None = None,
        clock: Callable[[], float] = time.monotonic,
        lost_after_s: float = LOST_AFTER_S,
        describe: bool = True,
    ) -> None:
        self.scheduler = scheduler
        # What the started requests hold, called directly: the scheduler's own lifecycle methods
        # only pass the call on, a Python call per step of every request.
        self._started = scheduler.started
        # Fixed by the config: read once, not per decision.
        self._header_hooks = scheduler.has_pre_request_before_send
        self._deferred_hooks = scheduler.has_deferred_pre_request
        self.lost_after_s = lost_after_s
        self.describe = describe
        self._last_sweep = clock()
        # Used only for the x-mmgate-request-tokens header when no token-producer is configured.
        self.pricing = pricing or PricingConfig()
        self.clock = clock
        self._states: dict[str, EndpointState] = {}
        self._endpoint_of: dict[str, Endpoint] = {}  # the record's endpoint each state was built from
        self._seq = itertools.count()
        self.states: Mapping[str, EndpointState] = MappingProxyType(self._states)
        """Every endpoint's scheduler state by name (read-only; in-flight counters live there)."""

    def state_of(self, record: EndpointRecord) -> EndpointState:
        endpoint = record.endpoint
        name = endpoint.name
        state = self._states.get(name)
        if state is None or (
            self._endpoint_of.get(name) is not endpoint
            and (state.url != endpoint.url or state.role != endpoint.role)
        ):
            labels = dict(endpoint.labels)
            if endpoint.role:
                labels[ROLE_LABEL] = endpoint.role
            fresh = EndpointState(name=name, url=endpoint.url, role=endpoint.role, labels=labels)
            if state is not None:
                fresh.inflight = state.inflight
            state = self._states[name] = fresh
        self._endpoint_of[name] = endpoint  # the same object next time: no string compares
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
        tenant: str | None = None,
    ) -> Decision:
        scheduler = self.scheduler
        if now - self._last_sweep >= SWEEP_EVERY_S:
            self._last_sweep = now
            scheduler.sweep(now, self.lost_after_s)
        # Each candidate's state, refreshed with its latest scrape: inline while the record's
        # endpoint is the one the state was built from (every decision but the first), else
        # through state_of, which (re)builds it.
        known, built_from = self._states, self._endpoint_of
        states = []
        for r in candidates:
            endpoint = r.endpoint
            state = known.get(endpoint.name)
            if state is None or built_from.get(endpoint.name) is not endpoint:
                state = self.state_of(r)
            else:
                state.metrics = r.metrics
            states.append(state)
        # The scheduler tracks in-flight requests by id; clients choose x-request-id, so two
        # concurrent requests may share one. A per-attempt suffix keeps their accounting apart.
        rid = f"{request_id}#{next(self._seq)}"
        request = SchedulingRequest(view, rid, headers, debug=debug, tenant=tenant)
        try:
            result = scheduler.schedule(request, states, now)
            primary = result.primary  # read once: a property that checks the profile's targets
        except NoEndpointsError as exc:
            raise NoEndpoint(str(exc)) from None
        target = primary.targets[0]
        decision = self._describe(target.name, request, result) if self.describe else Decision(target.name)
        decision.eligible = len(primary.candidates)
        decision.picked = len(primary.targets)
        predicted = request.data.get(PREDICTED_TTFT.name)
        if isinstance(predicted, PredictedTTFT):  # also when not describing: the DES reports errors
            decision.predicted_ttft_s = predicted.seconds.get(target.name)
        choice = request.data.get(ENCODE_CHOICE.name)
        if isinstance(choice, EncodeChoice):
            decision.encode = (choice.outcome, choice.reason)
            decision.encode_costs = (choice.local_cost, choice.tier_cost)
        if self._header_hooks:
            scheduler.pre_request_before_send(request, result, now)
            if request.upstream_headers:
                decision.headers = request.upstream_headers
        decision.handle = handle = _Handle(self, request, result, target)
        if self._deferred_hooks:  # else nothing to run, and nothing to schedule later
            decision.pre_request = handle.pre_request
        return decision

    def _describe(self, name: str, request: SchedulingRequest, result: SchedulingResult) -> Decision:
        """The decision for ``name``, its reporting fields filled from what the producers left in
        the request's data bag (the request is priced here only when no token-producer did).
        The bag is read directly, each value's type checked with isinstance: a method call per
        read is a measurable share of a text request's bill."""
        data = request.data
        tokenized = data.get(TOKENIZED_PROMPT.name)
        by_modality: dict[str, int] = {}
        if isinstance(tokenized, TokenizedPrompt):
            total = tokenized.total_tokens
            for item in tokenized.media:
                by_modality[item.modality] = by_modality.get(item.modality, 0) + item.length
            text = total - tokenized.media_tokens
        else:
            pricing = price(request.view, self.pricing)
            total = pricing.total_tokens
            for kind, count in pricing.by_modality.items():
                by_modality[kind] = count
            text = pricing.text_tokens
        tokens_by_modality = {str(m): n for m, n in by_modality.items() if n} if by_modality else {}
        if text:
            tokens_by_modality["text"] = text
        decision = Decision(
            endpoint=name,
            request_tokens=total,
            tokens_by_modality=tokens_by_modality,
            profile=result.primary_profile,
        )
        encoder = data.get(ENCODER_CACHE_MATCH.name)
        if isinstance(encoder, EncoderCacheMatch) and encoder.total_items:
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
        prefix = data.get(PREFIX_MATCH.name)
        if isinstance(prefix, PrefixMatch) and prefix.total_blocks:
            decision.prefix_match = prefix.ratio(name)
        if request.debug:
            decision.scores = _scores(result)
        return decision

    def fallbacks(self, decision: Decision) -> list[str]:
        handle = decision.handle
        assert isinstance(handle, _Handle)
        return [s.name for s in handle.result.primary.ranked() if s.name != decision.endpoint]

    def started(self, decision: Decision) -> None:
        handle = decision.handle
        assert isinstance(handle, _Handle)
        self._started.start(handle.request, handle.result, self.clock(), target=handle.target)

    def first_token(self, decision: Decision) -> None:
        handle = decision.handle
        assert isinstance(handle, _Handle)
        self._started.on_first_token(handle.request.request_id, self.clock())

    def stage_done(self, decision: Decision, endpoint: str) -> None:
        handle = decision.handle
        assert isinstance(handle, _Handle)
        self._started.on_stage_done(handle.request.request_id, endpoint, self.clock())

    def finished(self, decision: Decision, *, ok: bool) -> None:
        handle = decision.handle
        assert isinstance(handle, _Handle)
        # A failure before the first byte releases what the request held, as a finish does.
        self._started.on_finished(handle.request.request_id, self.clock())

    def forget(self, endpoint: str) -> None:
        self._states.pop(endpoint, None)
        self._endpoint_of.pop(endpoint, None)
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
