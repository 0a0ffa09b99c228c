"""mm-embeddings-cache-affinity-filter: encoder-cache stickiness behind a load gate."""

from __future__ import annotations

from typing import Any

from mmgate.scheduling import EndpointState
from mmgate.scheduling.keys import ENCODER_CACHE_MATCH, EncoderCacheMatch
from mmgate.scheduling.plugins.mm_embeddings_cache_affinity_filter import MMEmbeddingsCacheAffinityFilter
from support.scheduling import endpoints, request, scheduler


def make_filter(**params: Any) -> MMEmbeddingsCacheAffinityFilter:
    s = scheduler([{"type": "mm-embeddings-cache-affinity-filter", "parameters": params}], seed=5)
    f = s.plugins["mm-embeddings-cache-affinity-filter"]
    assert isinstance(f, MMEmbeddingsCacheAffinityFilter)
    return f


def run(
    f: MMEmbeddingsCacheAffinityFilter, eps: list[EndpointState], held: dict[int, list[int]]
) -> list[EndpointState]:
    """A request with a 900-token and a 100-token image; ``held`` maps endpoint → item indices."""
    tokens = [900, 100]
    match = EncoderCacheMatch(
        identities=["big", "small"],
        modalities=["image", "image"],
        tokens=tokens,
        matched_items={eps[i].name: len(idx) for i, idx in held.items()},
        matched_tokens={eps[i].name: sum(tokens[j] for j in idx) for i, idx in held.items()},
        matched_indices={eps[i].name: idx for i, idx in held.items()},
        holders=[frozenset(eps[i].name for i, idx in held.items() if j in idx) for j in range(2)],
    )
    req = request()
    req.put(ENCODER_CACHE_MATCH, match)
    return f.filter(req, eps)


def test_keeps_pods_holding_enough_of_the_media_by_tokens() -> None:
    f = make_filter(affinityThreshold=0.5)
    eps = endpoints(3)
    # Pod 1 holds the big image (90% of the media tokens), pod 2 only the thumbnail (10%).
    assert run(f, eps, {1: [0], 2: [1]}) == [eps[1]]
    assert f.last_outcome == "sticky"


def test_no_holder_keeps_every_pod() -> None:
    f = make_filter()
    eps = endpoints(3)
    assert run(f, eps, {2: [1]}) == eps
    assert f.last_outcome == "no-match"


def test_a_busy_holder_is_released_once_waiting_costs_more_than_encoding_saves() -> None:
    f = make_filter(maxTTFTPenaltyMs=100.0, peakPrefillThroughput=10000.0)  # 100 ms = 1,000 tokens
    eps = endpoints(3)
    eps[1].inflight.tokens = 900  # 90 ms behind the idle pods: still worth the hit
    assert run(f, eps, {1: [0, 1]}) == [eps[1]]
    eps[1].inflight.tokens = 1500  # 150 ms behind: the gate opens
    assert run(f, eps, {1: [0, 1]}) == eps
    assert f.last_outcome == "load-override"


def test_requests_without_media_pass_through() -> None:
    f = make_filter()
    eps = endpoints(2)
    assert f.filter(request(), eps) == eps
    assert f.last_outcome == "not-applicable"


def test_impossible_gate_settings_are_refused_when_configured() -> None:
    import pytest

    from mmgate.config import ConfigError

    for bad in ({"affinityThreshold": 1.5}, {"maxTTFTPenaltyMs": -1}, {"peakPrefillThroughput": 0}):
        with pytest.raises((ConfigError, ValueError)):
            make_filter(**bad)
