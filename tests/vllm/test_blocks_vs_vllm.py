"""Block keys against an implementation of vLLM's documented algorithm written here, not taken
from mmgate: every ``--prefix-caching-hash-algo``, every extra-key generation, text-only and
multimodal sequences, cache salt, LoRA, NONE_HASH seeding and the 64-bit event truncation.

The reference follows vLLM's own structure: ``request_block_hasher`` walks the full blocks,
``generate_block_hash_extra_keys`` concatenates lora + mm + cache_salt keys, and
``_gen_mm_extra_hash_keys`` walks the media items with a cursor carried from block to block.
"""

from __future__ import annotations

import hashlib
import pickle
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import cbor2
import pytest
import xxhash
from hypothesis import given, settings
from hypothesis import strategies as st

from mmgate.vllm.blocks import BlockHasher, KeyFormat, LoRA, block_extra_keys, event_hash

ALGOS = ("sha256", "sha256_cbor", "xxhash", "xxhash_cbor")
FORMATS = ("tagged", "identifier", "offset")


@dataclass(frozen=True)
class Item:
    identity: str
    offset: int
    length: int


# --- the reference --------------------------------------------------------------------------


def ref_hash_fn(algo: str) -> Callable[[object], bytes]:
    """vllm/utils/hashing.py: pickle (HIGHEST_PROTOCOL) or canonical CBOR, then SHA-256 or XXH3-128."""

    def serialize(obj: object) -> bytes:
        if algo.endswith("_cbor"):
            return cbor2.dumps(obj, canonical=True)
        return pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)

    def digest(data: bytes) -> bytes:
        if algo.startswith("sha256"):
            return hashlib.sha256(data).digest()
        return xxhash.xxh3_128(data).digest()

    return lambda obj: digest(serialize(obj))


def ref_mm_key(generation: str, identifier: str, offset: int) -> Any:
    return {"tagged": ("mm", identifier, offset), "identifier": identifier, "offset": (identifier, offset)}[
        generation
    ]


def ref_block_keys(
    algo: str,
    seed: str,
    block_size: int,
    tokens: list[int],
    items: list[Item],
    salt: str | None,
    lora: tuple[str, str] | None,
    generation: str,
) -> list[bytes]:
    h = ref_hash_fn(algo)
    none_hash = h(seed)
    keys: list[bytes] = []
    parent: bytes | None = None
    cursor = 0
    start = 0
    while start + block_size <= len(tokens):  # full blocks only
        end = start + block_size
        mm: list[Any] = []
        while cursor < len(items):
            item = items[cursor]
            if end > item.offset:
                if start > item.offset + item.length:
                    cursor += 1
                    continue
                mm.append(ref_mm_key(generation, item.identity, item.offset - start))
                if end >= item.offset + item.length:
                    cursor += 1
                else:
                    break
            else:
                break
        lora_keys: list[Any] = []
        if lora is not None:
            lora_keys = [("lora", lora[0], lora[1])] if generation == "tagged" else [lora[0]]
        salt_keys: list[Any] = []
        if start == 0 and salt:
            salt_keys = [("cache_salt", salt)] if generation == "tagged" else [salt]
        extra = lora_keys + mm + salt_keys
        block = h((parent or none_hash, tuple(tokens[start:end]), tuple(extra) if extra else None))
        keys.append(block)
        parent = block
        start = end
    return keys


# --- the cases ------------------------------------------------------------------------------

IMG = 151_655
TEXT = list(range(1, 70))
# Three images: one spanning blocks 1-3, one ending exactly on a block boundary, one in the tail.
MM_TOKENS = [7] * 20 + [IMG] * 30 + [8] * 14 + [IMG] * 16 + [9] * 5 + [IMG] * 3 + [10] * 12
MM_ITEMS = [Item("img-a", 20, 30), Item("img-b", 64, 16), Item("img-c", 85, 3)]

CASES: dict[str, tuple[list[int], list[Item], str | None, tuple[str, str] | None]] = {
    "text": (TEXT, [], None, None),
    "text-salt": (TEXT, [], "tenant-1", None),
    "multimodal": (MM_TOKENS, MM_ITEMS, None, None),
    "multimodal-salt": (MM_TOKENS, MM_ITEMS, "tenant-1", None),
    "lora": (TEXT, [], None, ("adapter-1", "/adapters/one")),
    "everything": (MM_TOKENS, MM_ITEMS, "tenant-2", ("adapter-1", "/adapters/one")),
}


@pytest.mark.parametrize("generation", FORMATS)
@pytest.mark.parametrize("algo", ALGOS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_block_keys_equal_the_reference(algo: str, generation: str, case: str) -> None:
    tokens, items, salt, lora = CASES[case]
    hasher = BlockHasher(algo, 16, seed="1234", key_format=generation)
    got = hasher.block_hashes(tokens, items, salt, None if lora is None else LoRA(*lora))
    want = ref_block_keys(algo, "1234", 16, tokens, items, salt, lora, generation)
    assert len(want) == len(tokens) // 16 and len(want) >= 4
    assert got == want


@pytest.mark.parametrize("generation", FORMATS)
def test_block_by_block_hashing_equals_the_reference(generation: str) -> None:
    """The simulator hashes blocks one at a time as they fill (``hash_block`` + ``block_extra_keys``)."""
    tokens, items, salt, _ = CASES["multimodal-salt"]
    hasher = BlockHasher("sha256_cbor", 16, seed="s", key_format=generation)
    fmt = KeyFormat(generation)
    keys: list[Any] = []
    for b in range(len(tokens) // 16):
        extra, _ = block_extra_keys(b * 16, (b + 1) * 16, items, salt, fmt=fmt)
        keys.append(
            hasher.hash_block(keys[-1] if keys else None, tuple(tokens[b * 16 : (b + 1) * 16]), extra)
        )
    assert keys == ref_block_keys("sha256_cbor", "s", 16, tokens, items, salt, None, generation)


@settings(max_examples=60, deadline=None)
@given(
    algo=st.sampled_from(ALGOS),
    generation=st.sampled_from(FORMATS),
    block_size=st.integers(1, 24),
    layout=st.lists(st.tuples(st.integers(0, 30), st.integers(1, 40), st.integers(0, 3)), max_size=5),
    tail=st.integers(0, 40),
    salt=st.sampled_from([None, "s"]),
    lora=st.sampled_from([None, ("a", "/p")]),
)
def test_random_sequences_equal_the_reference(
    algo: str,
    generation: str,
    block_size: int,
    layout: list[tuple[int, int, int]],
    tail: int,
    salt: str | None,
    lora: tuple[str, str] | None,
) -> None:
    tokens: list[int] = []
    items: list[Item] = []
    for gap, length, which in layout:
        tokens += [5] * gap
        items.append(Item(f"img-{which}", len(tokens), length))
        tokens += [IMG] * length
    tokens += [6] * tail
    hasher = BlockHasher(algo, block_size, seed="9", key_format=generation)
    got = hasher.block_hashes(tokens, items, salt, None if lora is None else LoRA(*lora))
    assert got == ref_block_keys(algo, "9", block_size, tokens, items, salt, lora, generation)


def test_media_changes_keys_from_its_first_block_in_every_generation() -> None:
    tokens, items, _, _ = CASES["multimodal"]
    other = [Item("img-z", 20, 30), *items[1:]]
    for generation in FORMATS:
        hasher = BlockHasher("sha256", 16, seed="x", key_format=generation)
        a, b = hasher.block_hashes(tokens, items), hasher.block_hashes(tokens, other)
        assert a[0] == b[0]  # block 0 ends before the image at 20
        assert all(x != y for x, y in zip(a[1:], b[1:], strict=True))


@pytest.mark.parametrize("algo", ALGOS)
def test_none_hash_seed_is_pythonhashseed_when_set(algo: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONHASHSEED", "4242")
    got = BlockHasher(algo, 16).block_hashes(TEXT)
    assert got == ref_block_keys(algo, "4242", 16, TEXT, [], None, None, "tagged")


@pytest.mark.parametrize("algo", ["sha256", "sha256_cbor"])
def test_sha256_family_defaults_to_vllms_fixed_seed(algo: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYTHONHASHSEED", raising=False)
    got = BlockHasher(algo, 16).block_hashes(TEXT)
    assert got == ref_block_keys(algo, "vllm-none-hash", 16, TEXT, [], None, None, "tagged")


@pytest.mark.parametrize("algo", ["xxhash", "xxhash_cbor"])
def test_xxhash_family_without_seed_is_random_per_process(algo: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYTHONHASHSEED", raising=False)
    assert BlockHasher(algo, 16).block_hashes(TEXT) != BlockHasher(algo, 16).block_hashes(TEXT)


@pytest.mark.parametrize("algo", ALGOS)
def test_events_publish_the_last_8_bytes_as_an_integer(algo: str) -> None:
    keys = ref_block_keys(algo, "1", 16, TEXT, [], None, None, "tagged")
    assert len(keys[0]) == (32 if algo.startswith("sha256") else 16)
    assert [event_hash(k) for k in BlockHasher(algo, 16, seed="1").block_hashes(TEXT)] == [
        int.from_bytes(k[-8:], "big") for k in keys
    ]
