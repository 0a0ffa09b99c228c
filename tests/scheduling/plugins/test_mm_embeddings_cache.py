"""mm-embeddings-cache-producer + mm-embeddings-cache-scorer: encoder-cache affinity."""

from __future__ import annotations

from typing import Any

import pytest

from mmgate.request.view import Modality
from mmgate.scheduling import EndpointState, ProfileResult, SchedulingRequest, SchedulingResult
from mmgate.scheduling.keys import ENCODER_CACHE_MATCH, TOKENIZED_PROMPT, TokenizedPrompt
from mmgate.scheduling.plugins.mm_embeddings_cache_producer import MMEmbeddingsCacheProducer
from mmgate.scheduling.plugins.mm_embeddings_cache_scorer import MMEmbeddingsCacheScorer
from mmgate.tokens import MMItem
from support.scheduling import endpoints, request, scheduler


def plugins(
    scorer: dict[str, Any] | None = None, **params: Any
) -> tuple[MMEmbeddingsCacheProducer, MMEmbeddingsCacheScorer]:
    s = scheduler(
        [
            {"type": "mm-embeddings-cache-producer", "parameters": params},
            {"type": "mm-embeddings-cache-scorer", "parameters": scorer},
        ]
    )
    p, sc = s.plugins["mm-embeddings-cache-producer"], s.plugins["mm-embeddings-cache-scorer"]
    assert isinstance(p, MMEmbeddingsCacheProducer) and isinstance(sc, MMEmbeddingsCacheScorer)
    return p, sc


def req(*items: tuple[str, int]) -> SchedulingRequest:
    r = request()
    media, offset = [], 0
    for identity, length in items:
        media.append(MMItem(identity, Modality.IMAGE, offset, length))
        offset += length
    r.put(TOKENIZED_PROMPT, TokenizedPrompt([0] * offset, media, offset, offset))
    return r


def single(ep: EndpointState, profile: str = "default") -> SchedulingResult:
    return SchedulingResult({profile: ProfileResult([ep], [ep], [1.0])}, profile)


def serve(
    p: MMEmbeddingsCacheProducer, r: SchedulingRequest, result: SchedulingResult, eps: list[EndpointState]
) -> None:
    p.produce(r, eps)
    p.pre_request(r, result, 0.0)


def test_default_capacity_is_2048_items() -> None:
    p, _ = plugins()
    assert p.capacity == 2048
    assert plugins(cacheSizeInMBPerServer=10)[0].capacity == 5


def test_score_is_matched_over_distinct_items() -> None:
    p, sc = plugins()
    eps = endpoints(3)
    serve(p, req(("a", 900), ("b", 900)), single(eps[0]), eps)
    serve(p, req(("c", 64)), single(eps[1]), eps)
    r = req(("a", 900), ("a", 900), ("c", 64), ("d", 100))  # "a" twice: counted once
    p.produce(r, eps)
    info = r.get(ENCODER_CACHE_MATCH)
    assert info is not None and info.identities == ["a", "c", "d"]
    assert sc.score(r, eps) == pytest.approx([1 / 3, 1 / 3, 0.0])
    assert info.hits_by_modality(eps[0].name) == {"image": 1}
    assert info.hits_by_modality(eps[2].name) == {}


def test_each_endpoint_counts_the_items_it_holds_with_their_tokens_and_positions() -> None:
    p, _ = plugins()
    eps = endpoints(3)
    serve(p, req(("a", 900), ("b", 500)), single(eps[0]), eps)
    serve(p, req(("b", 500), ("c", 64)), single(eps[1]), eps)
    r = req(("x", 10), ("b", 500), ("a", 900), ("b", 500), ("c", 64))  # "b" twice: counted once
    p.produce(r, eps)
    info = r.get(ENCODER_CACHE_MATCH)
    assert info is not None and info.identities == ["x", "b", "a", "c"]
    assert info.tokens == [10, 500, 900, 64]
    assert info.modalities == ["image"] * 4
    a, b = eps[0].name, eps[1].name
    assert info.matched_items == {a: 2, b: 2}
    assert info.matched_tokens == {a: 1400, b: 564}
    assert info.matched_indices == {a: [1, 2], b: [1, 3]}
    assert [sorted(h) for h in info.holders] == [[], sorted([a, b]), [a], [b]]


def test_size_weighted_variant_weighs_items_by_tokens() -> None:
    p, sc = plugins(scorer={"sizeWeighted": True})
    eps = endpoints(2)
    serve(p, req(("big", 900)), single(eps[0]), eps)
    serve(p, req(("thumb", 100)), single(eps[1]), eps)
    r = req(("big", 900), ("thumb", 100))
    p.produce(r, eps)
    assert sc.score(r, eps) == pytest.approx([0.9, 0.1])


def test_text_only_request_scores_zero() -> None:
    p, sc = plugins()
    r = req()
    p.produce(r, endpoints(2))
    assert sc.score(r, endpoints(2)) == [0.0, 0.0]


def test_encode_profile_target_is_recorded_not_decode() -> None:
    """llm-d #2626: in E/PD the decode pod was recorded; mmgate records the encoder."""
    p, sc = plugins()
    encoder, decoder = endpoints(2)
    result = SchedulingResult(
        {
            "decode": ProfileResult([decoder], [decoder], [1.0]),
            "encode": ProfileResult([encoder], [encoder], [1.0]),
        },
        "decode",
    )
    serve(p, req(("a", 900)), result, [encoder, decoder])
    r = req(("a", 900))
    p.produce(r, [encoder, decoder])
    assert sc.score(r, [encoder, decoder]) == [1.0, 0.0]


def test_encode_profile_that_did_not_run_falls_back_to_primary() -> None:
    p, _ = plugins()
    ep = endpoints(1)[0]
    result = SchedulingResult({"decode": ProfileResult([ep], [ep], [1.0]), "encode": None}, "decode")
    serve(p, req(("a", 1)), result, [ep])
    assert p.index.holds(ep.name, "a")


def test_per_endpoint_lru_eviction_and_removal() -> None:
    p, _ = plugins(cacheSizeInMBPerServer=4)  # 2 items per endpoint
    a, b = endpoints(2)
    for ident in ("x", "y", "z"):
        serve(p, req((ident, 1)), single(a), [a, b])
    serve(p, req(("x", 1)), single(b), [a, b])
    assert not p.index.holds(a.name, "x") and p.index.holds(a.name, "z")
    assert p.index.holds(b.name, "x")
    p.remove_endpoint(a.name)
    p.remove_endpoint(b.name)
    assert len(p.index) == 0 and p.index.endpoints() == []
