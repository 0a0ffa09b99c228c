"""prefix-cache-affinity-filter: threshold, exploration and the TTFT load gate."""

from __future__ import annotations

from typing import Any

import pytest

from mmgate.config import ConfigError
from mmgate.scheduling import EndpointState
from mmgate.scheduling.keys import PREFIX_MATCH, PrefixMatch
from mmgate.scheduling.plugins.prefix_cache_affinity_filter import PrefixCacheAffinityFilter
from support.scheduling import endpoints, request, scheduler


def make_filter(**params: Any) -> PrefixCacheAffinityFilter:
    s = scheduler([{"type": "prefix-cache-affinity-filter", "parameters": params}], seed=5)
    f = s.plugins["prefix-cache-affinity-filter"]
    assert isinstance(f, PrefixCacheAffinityFilter)
    return f


def run(
    f: PrefixCacheAffinityFilter, eps: list[EndpointState], matched: dict[int, int]
) -> list[EndpointState]:
    req = request()
    req.put(
        PREFIX_MATCH, PrefixMatch(16, 10, 160, list(range(10)), {eps[i].name: m for i, m in matched.items()})
    )
    return f.filter(req, eps)


def test_defaults_match_llm_d() -> None:
    p = make_filter().params
    assert (p.affinityThreshold, p.explorationProbability, p.maxTTFTPenaltyMs, p.peakPrefillThroughput) == (
        0.8,
        0.0,
        18000.0,
        15928.0,
    )


def test_keeps_only_sticky_endpoints() -> None:
    f = make_filter(affinityThreshold=0.6)
    eps = endpoints(4)
    assert run(f, eps, {1: 6, 2: 9, 3: 5}) == [eps[1], eps[2]]
    assert f.last_outcome == "sticky"


def test_no_sticky_keeps_all() -> None:
    f = make_filter()
    eps = endpoints(3)
    assert run(f, eps, {0: 7}) == eps
    assert f.last_outcome == "no-match"


def test_exploration_skips_the_gate() -> None:
    f = make_filter(explorationProbability=1.0)
    eps = endpoints(3)
    assert run(f, eps, {0: 10}) == eps
    assert f.last_outcome == "exploration"


def test_ttft_gate_breaks_stickiness_when_sticky_pod_is_overloaded() -> None:
    f = make_filter(peakPrefillThroughput=1000, maxTTFTPenaltyMs=2000)
    eps = endpoints(3)
    eps[0].inflight.tokens = 3100  # 3100 ms of prefill queued
    eps[1].inflight.tokens = 1000
    eps[2].inflight.tokens = 2000
    # best non-sticky 1000 ms; sticky 3100 ms: penalty 2100 > 2000
    assert run(f, eps, {0: 10}) == eps
    assert f.last_outcome == "load-override"
    eps[0].inflight.tokens = 2900  # penalty 1900 <= 2000: stay sticky
    assert run(f, eps, {0: 10}) == [eps[0]]


def test_zero_penalty_means_always_stick() -> None:
    f = make_filter(maxTTFTPenaltyMs=0)
    eps = endpoints(2)
    eps[0].inflight.tokens = 10**9
    assert run(f, eps, {0: 10}) == [eps[0]]


@pytest.mark.parametrize(
    "params",
    [
        {"affinityThreshold": 1.5},
        {"explorationProbability": -0.1},
        {"maxTTFTPenaltyMs": -1},
        {"ttftSource": "latencyPredictor"},
    ],
)
def test_invalid_parameters(params: dict[str, Any]) -> None:
    with pytest.raises(ConfigError):
        make_filter(**params)
