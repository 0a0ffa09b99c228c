"""inflight-load-producer lifecycle, token-load-scorer and active-request-scorer."""

from __future__ import annotations

from typing import Any

import pytest

from mmgate.request.view import Modality
from mmgate.scheduling import EndpointState, ProfileResult, Scheduler, SchedulingResult
from mmgate.scheduling.keys import PREFIX_MATCH, TOKENIZED_PROMPT, PrefixMatch, TokenizedPrompt
from mmgate.scheduling.plugins.active_request_scorer import ActiveRequestScorer
from mmgate.scheduling.plugins.token_load_scorer import TokenLoadScorer
from mmgate.tokens import MMItem
from support.scheduling import endpoints, request, scheduler


def build(**params: Any) -> Scheduler:
    return scheduler(
        [{"type": "inflight-load-producer", "parameters": params}, {"type": "token-load-scorer"}]
    )


def start(
    s: Scheduler,
    ep: EndpointState,
    *,
    rid: str,
    total: int = 1000,
    matched_blocks: int = 0,
    media: list[MMItem] | None = None,
    profile: str | None = None,
    max_tokens: int | None = None,
) -> None:
    req = request(rid=rid)
    req.view.max_tokens = max_tokens
    req.put(
        TOKENIZED_PROMPT,
        TokenizedPrompt(list(range(total)), media or [], total, sum(m.length for m in media or [])),
    )
    req.put(PREFIX_MATCH, PrefixMatch(100, 10, total, [], {ep.name: matched_blocks}))
    s.producers[-1].produce(req, [ep])
    s.on_started(req, ep, 0.0, profile=profile)


def test_uncached_tokens_held_until_first_token() -> None:
    s = build()
    ep = endpoints(1)[0]
    start(s, ep, rid="a", total=1000, matched_blocks=3)  # 300 cached
    assert (ep.inflight.tokens, ep.inflight.requests) == (700, 1)
    s.on_first_token("a", 0.1)
    assert (ep.inflight.tokens, ep.inflight.requests) == (0, 1)
    s.on_first_token("a", 0.2)  # repeated chunk notifications change nothing
    s.on_finished("a", 0.3)
    assert (ep.inflight.tokens, ep.inflight.requests) == (0, 0)


def test_output_estimate_is_held_until_the_end() -> None:
    s = build(addEstimatedOutputTokens=True, outputRatio=0.5, maxEstimatedOutputTokens=400)
    ep = endpoints(1)[0]
    start(s, ep, rid="a", total=1000)  # output round(500) capped at 400
    assert ep.inflight.tokens == 1400
    s.on_first_token("a", 0.1)
    assert ep.inflight.tokens == 1400  # not a prefill endpoint: held to the end
    s.on_finished("a", 0.2)
    assert ep.inflight.tokens == 0
    start(s, ep, rid="b", total=1000, max_tokens=100)  # the client's cap wins
    assert ep.inflight.tokens == 1100


def test_prefill_profile_released_at_first_token_with_output_estimates() -> None:
    s = build(addEstimatedOutputTokens=True, outputRatio=0.0)
    prefill = endpoints(1)[0]
    start(s, prefill, rid="a", total=500, profile="prefill")
    s.on_first_token("a", 0.1)
    assert prefill.inflight.tokens == 0


def test_failure_releases_everything() -> None:
    s = build()
    ep = endpoints(1)[0]
    start(s, ep, rid="a")
    s.on_failed("a", 0.0)
    assert (ep.inflight.tokens, ep.inflight.requests, ep.inflight.media_tokens) == (0, 0, 0)


def test_media_part_of_uncached_tokens() -> None:
    s = build()
    ep = endpoints(1)[0]
    items = [MMItem("a", Modality.IMAGE, 100, 300), MMItem("b", Modality.IMAGE, 500, 300)]
    start(s, ep, rid="a", total=1000, matched_blocks=2, media=items)  # positions < 200 cached
    assert ep.inflight.tokens == 800
    assert ep.inflight.media_tokens == 200 + 300


def test_token_load_scorer_formula_and_encoder_cost() -> None:
    plain = scheduler([{"type": "token-load-scorer", "parameters": {"queueThresholdTokens": 1000}}])
    weighted = scheduler(
        [{"type": "token-load-scorer", "parameters": {"queueThresholdTokens": 1000, "encoderCostFactor": 3}}]
    )
    eps = endpoints(3)
    eps[0].inflight.tokens, eps[0].inflight.media_tokens = 400, 0
    eps[1].inflight.tokens, eps[1].inflight.media_tokens = 400, 200
    eps[2].inflight.tokens = 5000
    a, b = plain.plugins["token-load-scorer"], weighted.plugins["token-load-scorer"]
    assert isinstance(a, TokenLoadScorer) and isinstance(b, TokenLoadScorer)
    assert a.score(request(), eps) == pytest.approx([0.6, 0.6, 0.0])
    assert b.score(request(), eps) == pytest.approx([0.6, 0.2, 0.0])  # 400 + 2*200 = 800


def test_active_request_scorer() -> None:
    s = scheduler(
        [{"type": "active-request-scorer", "parameters": {"idleThreshold": 1, "maxBusyScore": 0.5}}]
    )
    scorer = s.plugins["active-request-scorer"]
    assert isinstance(scorer, ActiveRequestScorer)
    eps = endpoints(4)
    for ep, n in zip(eps, [0, 1, 2, 4], strict=True):
        ep.inflight.requests = n
    assert scorer.score(request(), eps) == pytest.approx([1.0, 1.0, 0.25, 0.0])


def test_load_follows_the_endpoint_actually_used_on_retry() -> None:
    s = build()
    a, b = endpoints(2)
    start(s, a, rid="r")
    s.on_failed("r", 0.0)
    start(s, b, rid="r")
    assert (a.inflight.tokens, b.inflight.tokens) == (0, 1000)
    result = SchedulingResult({"default": ProfileResult([b], [a, b], [0.0, 1.0])}, "default")
    assert result.primary.ranked() == [b, a]
