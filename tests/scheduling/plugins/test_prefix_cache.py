"""approx-prefix-cache-producer + prefix-cache-scorer, against llm-d's hashing and scoring."""

from __future__ import annotations

import struct

import pytest
import xxhash

from mmgate.request.view import Modality
from mmgate.scheduling import EndpointState, Metrics, SchedulingRequest
from mmgate.scheduling.keys import PREFIX_MATCH, TOKENIZED_PROMPT, PrefixMatch, TokenizedPrompt
from mmgate.scheduling.plugins.approx_prefix_cache_producer import ApproxPrefixCacheProducer, block_hashes
from mmgate.scheduling.plugins.prefix_cache_scorer import PrefixCacheScorer
from mmgate.tokens import MMItem
from support.scheduling import endpoints, image, request, scheduler

SMALL = {"autoTune": False, "blockSizeTokens": 4, "minBlockSizeTokens": 4}


def test_block_hashes_chain_each_block_on_the_previous_hash() -> None:
    tokens = list(range(10))
    got = block_hashes(tokens, 4, "model", 100)
    seed = xxhash.xxh3_64_intdigest(b"model")
    expected = []
    prev = seed
    for start in range(0, 10, 4):
        block = struct.pack(f"<{len(tokens[start : start + 4])}I", *tokens[start : start + 4])
        prev = xxhash.xxh3_64_intdigest(block, prev)
        expected.append(prev)
    assert got == expected
    assert len(got) == 3  # the last, partial block counts


def test_chain_properties() -> None:
    a = block_hashes([1] * 12, 4, "m", 100)
    b = block_hashes([1] * 4 + [2] * 8, 4, "m", 100)
    assert a[0] == b[0] and a[1] != b[1] and a[2] != b[2]  # a change propagates down the chain
    assert block_hashes([1] * 12, 4, "other-model", 100)[0] != a[0]
    assert block_hashes([1] * 12, 4, "m", 2) == a[:2]


def make(tokens: list[int], rid: str = "r") -> SchedulingRequest:
    req = request(rid=rid)
    req.put(TOKENIZED_PROMPT, TokenizedPrompt(tokens, [], len(tokens), 0))
    return req


def producer(**params: object) -> ApproxPrefixCacheProducer:
    s = scheduler([{"type": "approx-prefix-cache-producer", "parameters": {**SMALL, **params}}])
    p = s.plugins["approx-prefix-cache-producer"]
    assert isinstance(p, ApproxPrefixCacheProducer)
    return p


def record(p: ApproxPrefixCacheProducer, tokens: list[int], ep: EndpointState) -> None:
    from mmgate.scheduling import ProfileResult, SchedulingResult

    req = make(tokens)
    p.produce(req, [ep])
    result = SchedulingResult({"default": ProfileResult([ep], [ep], [1.0])}, "default")
    p.pre_request(req, result, 0.0)


def match(p: ApproxPrefixCacheProducer, tokens: list[int], eps: list[EndpointState]) -> PrefixMatch:
    req = make(tokens)
    p.produce(req, eps)
    info = req.get(PREFIX_MATCH)
    assert info is not None
    return info


def test_recorded_prefix_matches_only_on_that_endpoint() -> None:
    p = producer()
    eps = endpoints(3)
    record(p, list(range(16)), eps[1])
    info = match(p, [*list(range(12)), 99, 99, 99, 99], eps)
    assert info.total_blocks == 4
    assert info.match_blocks(eps[1].name) == 3
    assert info.match_blocks(eps[0].name) == 0
    assert info.ratio(eps[1].name) == 0.75


def test_blocks_after_the_match_are_hashed_only_for_the_index_update() -> None:
    p = producer()
    eps = endpoints(2)
    record(p, list(range(16)), eps[0])  # 4 blocks
    tokens = list(range(64))  # the same 4 blocks, then 12 nobody holds
    req = make(tokens)
    p.produce(req, eps)
    info = req.get(PREFIX_MATCH)
    assert info is not None
    assert info.total_blocks == 16 and info.match_blocks(eps[0].name) == 4
    assert len(info.hashes) == 5  # the matched blocks and the first one nobody holds
    assert info.all_hashes() == block_hashes(tokens, 4, "m", 100) and len(info.hashes) == 16
    from mmgate.scheduling import ProfileResult, SchedulingResult

    p.pre_request(req, SchedulingResult({"default": ProfileResult([eps[1]], [eps[1]], [1.0])}, "default"), 0)
    assert match(p, tokens, eps).match_blocks(eps[1].name) == 16  # the whole chain was recorded


def test_a_repeated_media_prefix_is_not_hashed_again_and_hashes_the_same() -> None:
    p = producer()
    eps = endpoints(2)
    img = MMItem("img", Modality.IMAGE, 4, 8)  # blocks 0-2: text, then the image

    def prompt(tail: list[int], first: int = 1) -> SchedulingRequest:
        tokens = [first, 2, 3, 4, *[77] * 8, *tail]
        req = request(rid="r")
        req.put(TOKENIZED_PROMPT, TokenizedPrompt(tokens, [img], len(tokens), 8))
        return req

    from mmgate.scheduling import ProfileResult, SchedulingResult

    sent = SchedulingResult({"default": ProfileResult([eps[0]], [eps[0]], [1.0])}, "default")
    first = prompt(list(range(100, 110)))
    p.produce(first, eps)
    p.pre_request(first, sent, 0.0)
    assert len(p.chains) == 1 and p.chains.hits == 0
    tail = list(range(200, 213))
    again = prompt(tail)
    p.produce(again, eps)
    info = again.get(PREFIX_MATCH)
    assert info is not None and p.chains.hits == 1
    assert info.match_blocks(eps[0].name) == 3
    assert info.all_hashes() == block_hashes([1, 2, 3, 4, *[77] * 8, *tail], 4, "m", 100)
    other = prompt(tail, first=9)  # same length, other bytes: the prefix is not found
    p.produce(other, eps)
    found = other.get(PREFIX_MATCH)
    assert found is not None and p.chains.hits == 1 and found.match_blocks(eps[0].name) == 0
    assert found.all_hashes() == block_hashes([9, 2, 3, 4, *[77] * 8, *tail], 4, "m", 100)


def test_match_is_consecutive_from_the_first_block() -> None:
    p = producer()
    eps = endpoints(2)
    record(p, [5, 5, 5, 5, *list(range(12))], eps[0])
    # same later blocks, different first block: chained hashes differ, so nothing matches
    assert match(p, [6, 6, 6, 6, *list(range(12))], eps).match_blocks(eps[0].name) == 0


def test_image_identity_breaks_the_chain_at_its_block() -> None:
    s = scheduler(
        [
            {"type": "token-producer", "parameters": {"estimate": {"image": {"dynamic": {"factor": 1024}}}}},
            {"type": "approx-prefix-cache-producer", "parameters": SMALL},
        ]
    )
    eps = endpoints(2)
    first = request("system prompt " * 8, image("a" * 32, 64, 64), "question", rid="1")
    result = s.schedule(first, eps, 0.0)
    s.pre_request(first, result, 0.0)
    same = request("system prompt " * 8, image("a" * 32, 64, 64), "question", rid="2")
    other = request("system prompt " * 8, image("b" * 32, 64, 64), "question", rid="3")
    s.schedule(same, eps, 0.0)
    s.schedule(other, eps, 0.0)
    full, partial = same.get(PREFIX_MATCH), other.get(PREFIX_MATCH)
    assert full is not None and partial is not None
    target = result.target.name
    assert full.ratio(target) == 1.0
    text_blocks = len("system prompt " * 8) // 16  # 4 bytes per pseudo-token, 4 tokens per block
    assert partial.match_blocks(target) == text_blocks


def test_lru_capacity_evicts_oldest_per_endpoint() -> None:
    p = producer(lruCapacityPerServer=4)
    eps = endpoints(2)
    record(p, list(range(16)), eps[0])  # 4 blocks: full
    record(p, list(range(100, 108)), eps[0])  # 2 more: evicts the first two
    record(p, list(range(16)), eps[1])  # another endpoint's LRU is untouched by eps[0]
    assert match(p, list(range(16)), eps).match_blocks(eps[0].name) == 0
    assert match(p, list(range(16)), eps).match_blocks(eps[1].name) == 4
    assert p.index.size(eps[0].name) == 4


def test_autotune_block_size_and_capacity() -> None:
    p = producer(autoTune=True, minBlockSizeTokens=64)
    ep = EndpointState("a:1", metrics=Metrics(block_size=16, num_gpu_blocks=1000))
    assert p.block_size([ep]) == 64  # llm-d floors the engine's 16 at 64
    assert p.capacity(ep, 64) == 250  # 1000 blocks x 16 tokens / 64
    big = EndpointState("b:1", metrics=Metrics(block_size=128, num_gpu_blocks=10))
    assert p.block_size([big]) == 128
    off = producer(autoTune=False, blockSizeTokens=32, minBlockSizeTokens=64)
    assert off.block_size([big]) == 64
    assert off.capacity(big, 64) == 31250


def test_deprecated_block_size_key() -> None:
    p = producer(autoTune=False, blockSize=8, blockSizeTokens=16, minBlockSizeTokens=1)
    assert p.block_size([]) == 8


def test_remove_endpoint_cleans_the_index() -> None:
    p = producer()
    eps = endpoints(2)
    record(p, list(range(16)), eps[0])
    record(p, list(range(16)), eps[1])
    p.remove_endpoint(eps[0].name)
    assert eps[0].name not in p.index.endpoints()
    assert match(p, list(range(16)), eps).matched == {eps[1].name: 4}
    p.remove_endpoint(eps[1].name)
    assert len(p.index) == 0


def test_prefill_profile_target_is_recorded_too() -> None:
    from mmgate.scheduling import ProfileResult, SchedulingResult

    p = producer()
    decode, prefill = endpoints(2)
    req = make(list(range(8)))
    p.produce(req, [decode, prefill])
    result = SchedulingResult(
        {
            "decode": ProfileResult([decode], [decode], [1.0]),
            "prefill": ProfileResult([prefill], [prefill], [1.0]),
        },
        "decode",
    )
    p.pre_request(req, result, 0.0)
    assert set(p.index.endpoints()) == {decode.name, prefill.name}


@pytest.mark.parametrize(
    ("weight", "matched", "expected"),
    [(0.0, 3, 0.75), (1.0, 4, (16 / 32) ** 2), (0.5, 2, 0.5 * (8 / 32) ** 2 + 0.5 * 0.5)],
)
def test_prefix_scorer_formula(weight: float, matched: int, expected: float) -> None:
    s = scheduler(
        [
            {"type": "approx-prefix-cache-producer", "parameters": SMALL},
            {
                "type": "prefix-cache-scorer",
                "parameters": {"matchLengthWeight": weight, "matchLengthScaleTokens": 32},
            },
        ]
    )
    scorer = s.plugins["prefix-cache-scorer"]
    assert isinstance(scorer, PrefixCacheScorer)
    eps = endpoints(2)
    req = request()
    req.put(PREFIX_MATCH, PrefixMatch(4, 4, 16, [1, 2, 3, 4], {eps[0].name: matched}))
    assert scorer.score(req, eps) == pytest.approx([expected, 0.0])


def test_prefix_scorer_without_data_is_zero() -> None:
    s = scheduler([{"type": "prefix-cache-scorer"}])
    scorer = s.plugins["prefix-cache-scorer"]
    assert isinstance(scorer, PrefixCacheScorer)
    assert scorer.score(request(), endpoints(2)) == [0.0, 0.0]


def test_stream_bytes_equals_plain_packing() -> None:
    from mmgate.request.view import Modality
    from mmgate.scheduling.plugins.approx_prefix_cache_producer import stream_bytes
    from mmgate.tokens import MMItem

    ids = [1, 2, 3] + [77] * 5 + [4] + [88] * 3
    media = [MMItem("b", Modality.IMAGE, 9, 3), MMItem("a", Modality.IMAGE, 3, 5)]
    tp = TokenizedPrompt(ids, media, len(ids), 8)
    assert stream_bytes(tp) == struct.pack(f"<{len(ids)}I", *ids)
    assert block_hashes(stream_bytes(tp), 4, "m", 9) == block_hashes(ids, 4, "m", 9)
    assert stream_bytes(TokenizedPrompt([], [], 0, 0)) == b""
