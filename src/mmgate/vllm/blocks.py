"""vLLM-compatible KV-cache block hashing (prefix-cache keys).

A block key chains the parent block's key, the block's token ids and the block's extra keys,
exactly as vLLM's ``hash_block_tokens`` does::

    key = hash_fn((parent_key or NONE_HASH, tuple(block_token_ids), extra_keys_or_None))

Extra keys (vLLM 0.33 order: lora, mm, cache salt) are tagged tuples:
``("mm", identifier, item_offset - block_start)`` for every media item whose placeholder range
overlaps the block, and ``("cache_salt", salt)`` on the first block only. Only full blocks are
hashed. Everything here is a pure function of its inputs, so a router that knows a request's
token sequence computes the same keys a pod's prefix cache uses (given the same algorithm and
seed).

Algorithms: ``sha256`` (pickle, vLLM's default), ``sha256_cbor`` (canonical CBOR), ``xxhash`` /
``xxhash_cbor`` (xxh3-128 of pickle / canonical CBOR) and ``builtin`` — Python's ``hash()``, not
a vLLM algorithm: a fast, process-local key for the discrete-event simulator, where no key ever
leaves the process.
"""

from __future__ import annotations

import hashlib
import os
import pickle
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, Protocol, get_args

import cbor2
import xxhash

HashAlgo = Literal["sha256", "sha256_cbor", "xxhash", "xxhash_cbor", "builtin"]
HASH_ALGOS: tuple[str, ...] = get_args(HashAlgo)

BlockHash = bytes | int
"""A block key as the prefix cache stores it: the digest (32 bytes for sha256, 16 for xxhash),
or a Python int for ``builtin``."""

ExtraKeys = tuple[Any, ...] | None

_MASK64 = (1 << 64) - 1
VLLM_DEFAULT_SEED = "vllm-none-hash"


class MediaSpanLike(Protocol):
    """A media item's placeholder run in a token sequence (e.g. ``mmgate.tokens.sequence.MMItem``)."""

    @property
    def identity(self) -> str: ...
    @property
    def offset(self) -> int: ...
    @property
    def length(self) -> int: ...


def _sha256_pickle(obj: object) -> bytes:
    return hashlib.sha256(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)).digest()


def _sha256_cbor(obj: object) -> bytes:
    return hashlib.sha256(cbor2.dumps(obj, canonical=True)).digest()


def _xxhash_pickle(obj: object) -> bytes:
    return xxhash.xxh3_128_digest(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL))


def _xxhash_cbor(obj: object) -> bytes:
    return xxhash.xxh3_128_digest(cbor2.dumps(obj, canonical=True))


_FUNCTIONS: dict[str, Callable[[object], BlockHash]] = {
    "sha256": _sha256_pickle,
    "sha256_cbor": _sha256_cbor,
    "xxhash": _xxhash_pickle,
    "xxhash_cbor": _xxhash_cbor,
    "builtin": hash,
}


def hash_function(algo: str) -> Callable[[object], BlockHash]:
    """The byte-digest function vLLM's ``--prefix-caching-hash-algo ALGO`` uses."""
    try:
        return _FUNCTIONS[algo]
    except KeyError:
        raise ValueError(
            f"unknown prefix-caching hash algorithm {algo!r}; choose one of {HASH_ALGOS}"
        ) from None


def vllm_seed(algo: str, env: Mapping[str, str] | None = None) -> str:
    """The NONE_HASH seed vLLM 0.33 picks: ``$PYTHONHASHSEED`` if set, else a fixed string for the
    sha256 family, else a random one (vLLM warns: xxhash keys then differ between processes)."""
    environ = os.environ if env is None else env
    seed = environ.get("PYTHONHASHSEED")
    if seed is not None:
        return seed
    if algo in ("sha256", "sha256_cbor", "builtin"):
        return VLLM_DEFAULT_SEED
    return os.urandom(32).hex()


def none_hash(algo: str, seed: str) -> BlockHash:
    """The parent key of a sequence's first block: ``hash_fn(seed)``."""
    return hash_function(algo)(seed)


def event_hash(block_hash: BlockHash) -> int:
    """The integer vLLM publishes in KV events (``VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=1``, the
    default): the digest's last 8 bytes as a big-endian unsigned int."""
    if isinstance(block_hash, int):
        return block_hash & _MASK64
    return int.from_bytes(block_hash, "big") & _MASK64


def block_extra_keys(
    start: int,
    end: int,
    mm_items: Sequence[MediaSpanLike],
    cache_salt: str | None = None,
    first_item: int = 0,
) -> tuple[ExtraKeys, int]:
    """Extra keys of the block ``[start, end)`` and the index of the first item it may share with
    the next block. ``mm_items`` must be sorted by offset; ``first_item`` lets a caller walking the
    blocks in order skip items already passed (keeps a whole-sequence walk linear)."""
    keys: list[Any] = []
    i = first_item
    n = len(mm_items)
    while i < n:
        item = mm_items[i]
        offset = item.offset
        if end <= offset:
            break
        if start >= offset + item.length:
            i += 1
            continue
        keys.append(("mm", item.identity, offset - start))
        if end >= offset + item.length:
            i += 1
        else:
            break
    if start == 0 and cache_salt:
        keys.append(("cache_salt", cache_salt))
    return (tuple(keys) if keys else None), i


def extra_keys_by_block(
    block_size: int, mm_items: Sequence[MediaSpanLike], cache_salt: str | None
) -> dict[int, tuple[Any, ...]]:
    """Extra keys of every block that has any, computed per item rather than per block (the
    same keys :func:`block_extra_keys` gives, in the same order)."""
    keys: dict[int, tuple[Any, ...]] = {}
    for item in mm_items:
        offset = item.offset
        identity = item.identity
        for b in range(offset // block_size, (offset + item.length - 1) // block_size + 1):
            key = ("mm", identity, offset - b * block_size)
            prior = keys.get(b)
            keys[b] = (key,) if prior is None else (*prior, key)
    if cache_salt:
        keys[0] = (*keys.get(0, ()), ("cache_salt", cache_salt))
    return keys


def event_extra_keys(extra: ExtraKeys) -> list[Any] | None:
    """The untagged per-block form KV events carry: ``(identifier, offset)`` for media, the salt
    string for the cache salt."""
    if extra is None:
        return None
    out: list[Any] = []
    for key in extra:
        if key[0] == "mm":
            out.append((key[1], key[2]))
        else:
            out.append(key[1])
    return out


class BlockHasher:
    """Hashes token sequences into chained block keys for one algorithm, seed and block size."""

    __slots__ = ("algo", "block_size", "fn", "none_hash", "seed")

    def __init__(self, algo: str = "sha256", block_size: int = 16, seed: str | None = None) -> None:
        if block_size <= 0:
            raise ValueError("block_size must be positive")
        self.algo = algo
        self.fn = hash_function(algo)
        self.block_size = block_size
        self.seed = vllm_seed(algo) if seed is None else seed
        self.none_hash = self.fn(self.seed)

    def hash_block(self, parent: BlockHash | None, tokens: tuple[int, ...], extra: ExtraKeys) -> BlockHash:
        return self.fn((self.none_hash if parent is None else parent, tokens, extra))

    def block_hashes(
        self,
        token_ids: Sequence[int],
        mm_items: Sequence[MediaSpanLike] = (),
        cache_salt: str | None = None,
    ) -> list[BlockHash]:
        """Keys of every full block of a sequence, first block first (the hot path of admission:
        one tuple and one hash per block)."""
        bs = self.block_size
        fn = self.fn
        prev = self.none_hash
        extras = extra_keys_by_block(bs, mm_items, cache_salt or None) if mm_items or cache_salt else {}
        get_extra = extras.get
        out: list[BlockHash] = []
        append = out.append
        for b in range(len(token_ids) // bs):
            start = b * bs
            prev = fn((prev, tuple(token_ids[start : start + bs]), get_extra(b)))
            append(prev)
        return out
