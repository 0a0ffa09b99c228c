"""vLLM-compatible block keys: algorithms, NONE_HASH seeding, extra keys, event form."""

from __future__ import annotations

import hashlib
import pickle
from dataclasses import dataclass

import cbor2
import pytest
import xxhash
from hypothesis import given
from hypothesis import strategies as st

from mmgate.vllm.blocks import (
    BlockHasher,
    block_extra_keys,
    event_extra_keys,
    event_hash,
    extra_keys_by_block,
    hash_function,
    none_hash,
    vllm_seed,
)


@dataclass(frozen=True)
class MediaSpan:
    """A media item's placeholder run, shaped as :class:`mmgate.vllm.blocks.MediaSpanLike` asks."""

    identity: str
    offset: int
    length: int


def _pickle_sha(obj: object) -> bytes:
    return hashlib.sha256(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)).digest()


def test_sha256_chain_matches_vllm_formula() -> None:
    tokens = list(range(40))
    hasher = BlockHasher("sha256", 16, seed="vllm-none-hash")
    keys = hasher.block_hashes(tokens)
    assert len(keys) == 2  # the 8-token tail is not a full block
    root = _pickle_sha("vllm-none-hash")
    first = _pickle_sha((root, tuple(range(16)), None))
    second = _pickle_sha((first, tuple(range(16, 32)), None))
    assert keys == [first, second]


def test_sha256_cbor_is_canonical_cbor_of_the_triple() -> None:
    hasher = BlockHasher("sha256_cbor", 2, seed="s")
    (key,) = hasher.block_hashes([1, 300])
    root = hashlib.sha256(cbor2.dumps("s", canonical=True)).digest()
    # Hand-built CBOR: array(3) [bstr(32) root, array(2) [1, uint16 300], null]
    encoded = b"\x83" + b"\x58\x20" + root + b"\x82\x01\x19\x01\x2c" + b"\xf6"
    assert key == hashlib.sha256(encoded).digest()


def test_xxhash_variants_use_xxh3_128() -> None:
    obj = (b"p", (1, 2), None)
    assert hash_function("xxhash")(obj) == xxhash.xxh3_128_digest(pickle.dumps(obj, protocol=5))
    assert hash_function("xxhash_cbor")(obj) == xxhash.xxh3_128_digest(cbor2.dumps(obj, canonical=True))
    assert len(hash_function("xxhash")(obj)) == 16


def test_unknown_algorithm_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="sha256"):
        hash_function("md5")
    with pytest.raises(ValueError, match="tagged, identifier, offset"):
        BlockHasher("sha256", 16, key_format="v2")


def test_none_hash_seeding_follows_vllm() -> None:
    assert vllm_seed("sha256", {}) == "vllm-none-hash"
    assert vllm_seed("sha256_cbor", {}) == "vllm-none-hash"
    assert vllm_seed("xxhash", {"PYTHONHASHSEED": "7"}) == "7"
    assert vllm_seed("xxhash", {}) != vllm_seed("xxhash", {})  # random without PYTHONHASHSEED
    assert none_hash("sha256", "7") == _pickle_sha("7")


def test_mm_extra_keys_carry_identity_and_offset_in_every_overlapping_block() -> None:
    items = [MediaSpan("img-a", 10, 20), MediaSpan("img-b", 30, 4)]
    assert block_extra_keys(0, 16, items)[0] == (("mm", "img-a", 10),)
    # Block [16, 32) holds the end of img-a and the start of img-b.
    assert block_extra_keys(16, 32, items)[0] == (("mm", "img-a", -6), ("mm", "img-b", 14))
    assert block_extra_keys(32, 48, items)[0] == (("mm", "img-b", -2),)
    assert block_extra_keys(48, 64, items)[0] is None


def test_cache_salt_only_on_first_block_after_mm_keys() -> None:
    items = [MediaSpan("img", 4, 4)]
    assert block_extra_keys(0, 16, items, "salt")[0] == (("mm", "img", 4), ("cache_salt", "salt"))
    assert block_extra_keys(16, 32, items, "salt")[0] is None
    hasher = BlockHasher("sha256", 16, seed="x")
    salted = hasher.block_hashes(list(range(32)), cache_salt="tenant-1")
    plain = hasher.block_hashes(list(range(32)))
    assert salted[0] != plain[0] and salted[1] != plain[1]  # the chain carries the salt on


def test_same_text_other_image_differs_from_the_block_holding_the_image() -> None:
    tokens = [5] * 40 + [9] * 32 + [6] * 40  # image placeholders at 40..71
    hasher = BlockHasher("sha256", 16, seed="x")
    a = hasher.block_hashes(tokens, [MediaSpan("cat", 40, 32)])
    b = hasher.block_hashes(tokens, [MediaSpan("dog", 40, 32)])
    assert a[:2] == b[:2]  # blocks 0 and 1 end before token 40
    assert all(x != y for x, y in zip(a[2:], b[2:], strict=True))


def test_event_forms() -> None:
    digest = bytes(range(32))
    assert event_hash(digest) == int.from_bytes(digest[-8:], "big")
    assert event_extra_keys((("mm", "img", -3), ("cache_salt", "s"))) == [("img", -3), "s"]
    assert event_extra_keys(None) is None


@given(
    st.lists(st.tuples(st.integers(0, 40), st.integers(1, 40)), max_size=5),
    st.sampled_from([None, "salt"]),
    st.integers(1, 20),
)
def test_whole_sequence_walk_agrees_with_per_block_keys(
    gaps: list[tuple[int, int]], salt: str | None, block_size: int
) -> None:
    items = []
    pos = 0
    for i, (gap, length) in enumerate(gaps):
        items.append(MediaSpan(f"m{i}", pos + gap, length))
        pos += gap + length
    n = pos + 7
    bs = block_size
    by_block, default = extra_keys_by_block(bs, items, salt)
    expected = [block_extra_keys(b * bs, (b + 1) * bs, items, salt)[0] for b in range(n // bs)]
    assert [by_block.get(b, default) for b in range(n // bs)] == expected
