"""no-hit-lru-scorer: cold requests go to the endpoints least recently given a cold request."""

from __future__ import annotations

import pytest

from mmgate.scheduling import EndpointState, ProfileResult, SchedulingRequest, SchedulingResult
from mmgate.scheduling.keys import PREFIX_MATCH, PrefixMatch
from mmgate.scheduling.plugins.no_hit_lru_scorer import NoHitLRUScorer
from support.scheduling import endpoints, request, scheduler


def scorer() -> NoHitLRUScorer:
    s = scheduler([{"type": "no-hit-lru-scorer"}])
    sc = s.plugins["no-hit-lru-scorer"]
    assert isinstance(sc, NoHitLRUScorer)
    assert "approx-prefix-cache-producer" in s.plugins  # its data is produced by default
    return sc


def cold(eps: list[EndpointState], hits: dict[str, int] | None = None) -> SchedulingRequest:
    r = request()
    r.put(PREFIX_MATCH, PrefixMatch(16, 4, 64, [1, 2, 3, 4], hits or {}))
    return r


def choose(sc: NoHitLRUScorer, ep: EndpointState, r: SchedulingRequest) -> None:
    sc.pre_request(r, SchedulingResult({"default": ProfileResult([ep], [ep], [1.0])}, "default"), 0.0)


def test_never_used_first_then_least_recent() -> None:
    sc = scorer()
    eps = endpoints(3)
    r = cold(eps)
    assert sc.score(r, eps) == pytest.approx([1.0, 0.5, 0.0])
    choose(sc, eps[0], r)
    r = cold(eps)
    assert sc.score(r, eps) == pytest.approx([0.0, 1.0, 0.5])  # eps[0] used: ranks after never-used
    choose(sc, eps[1], r)
    r = cold(eps)
    # never used: eps[2] → 1.0; then eps[0] (older) → 0.5, eps[1] (newest) → 0.0
    assert sc.score(r, eps) == pytest.approx([0.5, 0.0, 1.0])


def test_warm_request_is_neutral_and_does_not_touch_the_lru() -> None:
    sc = scorer()
    eps = endpoints(2)
    r = cold(eps, {eps[1].name: 2})
    assert sc.score(r, eps) == [0.5, 0.5]
    choose(sc, eps[0], r)
    assert sc.score(cold(eps), eps) == pytest.approx([1.0, 0.0])


def test_removal_forgets_the_endpoint() -> None:
    sc = scorer()
    eps = endpoints(2)
    r = cold(eps)
    sc.score(r, eps)
    choose(sc, eps[0], r)
    sc.remove_endpoint(eps[0].name)
    assert sc.score(cold(eps), eps) == pytest.approx([1.0, 0.0])
