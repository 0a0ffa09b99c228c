"""``inflight-load-producer``: the prompt tokens and requests each endpoint is still working on.

Counters live on :class:`~mmgate.scheduling.types.EndpointState` (``inflight``) and move with the
scheduler's lifecycle callbacks, as llm-d's producer moves its trackers with PreRequest and the
response hooks:

- on start, the endpoint gains the request's *uncached* prompt tokens: the priced total minus the
  prefix the endpoint is believed to hold (llm-d's cached-prefix discount), plus, with
  ``addEstimatedOutputTokens``, round(input × ``outputRatio``) output tokens capped by the
  client's ``max_tokens`` and ``maxEstimatedOutputTokens``;
- at the first response chunk prefill is over: without output estimates all of the request's
  tokens are released; with them only a ``prefill``-profile endpoint's are;
- a stage pod (encode, prefill) whose legs the gateway saw end releases its share then;
- at the end (or a failure) whatever remains is released.

mmgate also tracks which part of the held tokens is media (``media_tokens``) so
``token-load-scorer`` can weigh encoder work.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from mmgate.scheduling.contracts import PluginHandle, Producer
from mmgate.scheduling.keys import (
    INFLIGHT_LOAD,
    PREFIX_MATCH,
    TOKENIZED_PROMPT,
    InflightEstimate,
    PrefixMatch,
    TokenizedPrompt,
)
from mmgate.scheduling.lifecycle import RequestLifecycle
from mmgate.scheduling.types import DataKey, EndpointState, SchedulingRequest

PREFILL_PROFILE = "prefill"


class InflightLoadParams(msgspec.Struct, forbid_unknown_fields=True):
    addEstimatedOutputTokens: bool = False
    outputRatio: float = 1.5
    maxEstimatedOutputTokens: int | None = None
    prefixMatchInfoProducerName: str = ""
    syncCrossReplicaState: bool = True  # accepted for llm-d configs; one gateway replica here


class _Held(msgspec.Struct):
    endpoint: EndpointState
    profile: str
    tokens: int
    media: int


def uncached_media(tp: TokenizedPrompt, cached_positions: int) -> int:
    """Media tokens lying after the first ``cached_positions`` positions of the stream."""
    total = 0
    for item in tp.media:
        end = item.offset + item.length
        if end > cached_positions:
            total += end - max(item.offset, cached_positions)
    return total


class InflightLoadProducer(Producer[InflightLoadParams], RequestLifecycle):
    type_name = "inflight-load-producer"

    def __init__(self, name: str, params: InflightLoadParams, handle: PluginHandle) -> None:
        super().__init__(name, params, handle)
        if params.outputRatio < 0:
            raise ValueError(f"outputRatio must be non-negative, got {params.outputRatio}")
        if params.maxEstimatedOutputTokens is not None and params.maxEstimatedOutputTokens < 0:
            raise ValueError("maxEstimatedOutputTokens must be non-negative")
        self._prefix_key: DataKey[PrefixMatch] = PREFIX_MATCH.scoped(params.prefixMatchInfoProducerName)
        self._keys = self.own_keys(INFLIGHT_LOAD)
        self._held: dict[str, list[_Held]] = {}

    def produces(self) -> tuple[DataKey[Any], ...]:
        return self._keys

    def consumes(self) -> tuple[DataKey[Any], ...]:
        return (TOKENIZED_PROMPT,)

    def consumes_optional(self) -> tuple[DataKey[Any], ...]:
        return (self._prefix_key,)

    def estimate_output(self, input_tokens: int, max_tokens: int | None) -> int:
        p = self.params
        if not p.addEstimatedOutputTokens:
            return 0
        out = round(input_tokens * p.outputRatio)
        if max_tokens is not None and 0 < max_tokens < out:
            out = max_tokens
        if p.maxEstimatedOutputTokens is not None and p.maxEstimatedOutputTokens < out:
            out = p.maxEstimatedOutputTokens
        return out

    def produce(self, request: SchedulingRequest, endpoints: Sequence[EndpointState]) -> None:
        tp = request.get(TOKENIZED_PROMPT)
        tokens = 0 if tp is None else tp.total_tokens
        est = InflightEstimate(tokens, self.estimate_output(tokens, request.view.max_tokens))
        for key in self._keys:
            request.put(key, est)

    def request_tokens(self, request: SchedulingRequest, endpoint: EndpointState) -> tuple[int, int]:
        """(tokens, media tokens) this request adds to ``endpoint``: uncached prompt + output."""
        tp = request.get(TOKENIZED_PROMPT)
        if tp is None:
            return 0, 0
        cached = 0
        info = request.get(self._prefix_key)
        if info is not None:
            cached = info.matched_tokens(endpoint.name)
        tokens = max(0, tp.total_tokens - cached)
        media = uncached_media(tp, cached)
        est = request.get(INFLIGHT_LOAD)
        output = est.output_tokens if est is not None else 0
        return tokens + output, min(media, tokens)

    def on_started(
        self, request: SchedulingRequest, endpoint: EndpointState, profile: str, now: float
    ) -> None:
        tokens, media = self.request_tokens(request, endpoint)
        endpoint.inflight.tokens += tokens
        endpoint.inflight.media_tokens += media
        self._held.setdefault(request.request_id, []).append(_Held(endpoint, profile, tokens, media))

    def on_first_token(self, request: SchedulingRequest, now: float) -> None:
        held = self._held.get(request.request_id)
        if not held:
            return
        release_all = not self.params.addEstimatedOutputTokens
        for h in held:
            if release_all or h.profile == PREFILL_PROFILE:
                _release(h)

    def on_stage_done(self, request: SchedulingRequest, endpoint: EndpointState, now: float) -> None:
        for h in self._held.get(request.request_id, ()):
            if h.endpoint is endpoint:
                _release(h)

    def on_finished(self, request: SchedulingRequest, now: float) -> None:
        for h in self._held.pop(request.request_id, ()):
            _release(h)


def _release(h: _Held) -> None:
    inflight = h.endpoint.inflight
    inflight.tokens = max(0, inflight.tokens - h.tokens)
    inflight.media_tokens = max(0, inflight.media_tokens - h.media)
    h.tokens = h.media = 0
