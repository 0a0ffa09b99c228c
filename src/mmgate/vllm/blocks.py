"""vLLM's prefix-cache block keys, computed exactly as a vLLM server computes them.

A router that knows a request's token ids and media items computes the keys the pod's prefix
cache uses and its KV events publish, so it can look a request up in what pods report. vLLM
(``hash_block_tokens``, ``get_request_block_hasher``) chains every **full** block::

    key[0] = hash_fn((NONE_HASH, tuple(tokens[0:B]), extra_keys[0] or None))
    key[i] = hash_fn((key[i-1], tuple(tokens[i*B:(i+1)*B]), extra_keys[i] or None))

* ``hash_fn`` is ``--prefix-caching-hash-algo``: ``sha256`` (SHA-256 of the pickled tuple,
  vLLM's default), ``sha256_cbor`` (SHA-256 of canonical CBOR, reproducible outside Python),
  ``xxhash`` / ``xxhash_cbor`` (XXH3-128 of the same two encodings). ``builtin`` is Python's
  ``hash()``, not a vLLM algorithm: a fast process-local key for the discrete-event simulator.
* ``NONE_HASH = hash_fn(seed)``, the seed being ``$PYTHONHASHSEED`` when set, else
  ``"vllm-none-hash"`` for the sha256 pair and a random one for the xxhash pair (whose keys then
  differ per process: set ``PYTHONHASHSEED`` on the pods and give mmgate the same seed).
* A block's extra keys, in vLLM's order: the LoRA adapter (every block of a LoRA request), each
  media item whose placeholder run overlaps the block (with the item's start relative to the
  block's, negative when it began earlier), and the ``cache_salt`` on the first block only. How
  they are spelled depends on the vLLM generation (:class:`KeyFormat`).
* KV events publish a key as its digest's last 8 bytes read as a big-endian integer
  (:func:`event_hash`, ``VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=1``, the default), and each stored
  block's extra keys in the generation's event form (:func:`event_extra_keys`).

Prompt embeddings (``("prompt_embeds", digest)``) are not modelled: mmgate forwards token prompts.
"""

from __future__ import annotations

import hashlib
import os
import pickle
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Literal, Protocol, get_args

import cbor2
import xxhash

__all__ = [
    "HASH_ALGOS",
    "VLLM_DEFAULT_SEED",
    "BlockHash",
    "BlockHasher",
    "ExtraKeys",
    "KeyFormat",
    "LoRA",
    "MediaSpanLike",
    "block_extra_keys",
    "event_extra_keys",
    "event_hash",
    "extra_keys_by_block",
    "hash_function",
    "media_identifier",
    "none_hash",
    "vllm_seed",
]

HashAlgo = Literal["sha256", "sha256_cbor", "xxhash", "xxhash_cbor", "builtin"]
HASH_ALGOS: tuple[str, ...] = get_args(HashAlgo)

BlockHash = bytes | int
"""A block key: the digest (32 bytes for sha256, 16 for xxhash), an ``int`` for ``builtin``, or
the 64-bit integer KV events carry."""

ExtraKeys = tuple[Any, ...] | None

_MASK64 = (1 << 64) - 1
VLLM_DEFAULT_SEED = "vllm-none-hash"


class KeyFormat(StrEnum):
    """How a vLLM generation spells a block's extra keys, in the hash input and in KV events.

    ``tagged`` (vLLM 0.33): ``("lora", name, path)``, ``("mm", identifier, offset)``,
    ``("cache_salt", salt)``; events drop the tags (name, ``[identifier, offset]``, salt).
    ``identifier`` (vLLM 0.18 and later untagged releases): bare strings, the LoRA name, each
    media item's identifier (no offset), the salt; events carry the same list.
    ``offset`` (releases before 0.18): the LoRA name, ``(identifier, offset)`` per media item, the
    salt; events carry the same list.
    """

    TAGGED = "tagged"
    IDENTIFIER = "identifier"
    OFFSET = "offset"

    def media(self, identifier: str, offset: int) -> Any:
        if self is KeyFormat.TAGGED:
            return ("mm", identifier, offset)
        if self is KeyFormat.IDENTIFIER:
            return identifier
        return (identifier, offset)

    def lora(self, lora: LoRA) -> Any:
        return ("lora", lora.name, lora.path) if self is KeyFormat.TAGGED else lora.name

    def salt(self, salt: str) -> Any:
        return ("cache_salt", salt) if self is KeyFormat.TAGGED else salt


@dataclass(frozen=True, slots=True)
class LoRA:
    """The adapter of a LoRA request as vLLM keys it (``LoRARequest.lora_name`` / ``lora_path``)."""

    name: str
    path: str = ""


class MediaSpanLike(Protocol):
    """A media item's placeholder run in a token sequence (e.g. ``mmgate.tokens.sequence.MMItem``)."""

    @property
    def identity(self) -> str: ...
    @property
    def offset(self) -> int: ...
    @property
    def length(self) -> int: ...


def media_identifier(mm_hash: str, lora_name: str | None = None) -> str:
    """The identifier vLLM keys a media item by: its hash (or client ``uuid``), prefixed with the
    adapter's name when the request's LoRA covers the vision tower (``enable_tower_connector_lora``)."""
    return mm_hash if lora_name is None else f"{lora_name}:{mm_hash}"


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
    *,
    lora: LoRA | None = None,
    fmt: KeyFormat = KeyFormat.TAGGED,
) -> tuple[ExtraKeys, int]:
    """Extra keys of the block ``[start, end)`` and the index of the first item it may share with
    the next block. ``mm_items`` must be sorted by offset; ``first_item`` lets a caller walking the
    blocks in order skip items already passed (keeps a whole-sequence walk linear)."""
    keys: list[Any] = [fmt.lora(lora)] if lora is not None else []
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
        keys.append(fmt.media(item.identity, offset - start))
        if end >= offset + item.length:
            i += 1
        else:
            break
    if start == 0 and cache_salt:
        keys.append(fmt.salt(cache_salt))
    return (tuple(keys) if keys else None), i


def extra_keys_by_block(
    block_size: int,
    mm_items: Sequence[MediaSpanLike],
    cache_salt: str | None,
    *,
    lora: LoRA | None = None,
    fmt: KeyFormat = KeyFormat.TAGGED,
) -> tuple[dict[int, tuple[Any, ...]], ExtraKeys]:
    """Extra keys of every block, computed per item rather than per block (the same keys
    :func:`block_extra_keys` gives, in the same order): the blocks holding media or the salt, and
    the keys of every other block (the LoRA key, or None)."""
    base: tuple[Any, ...] = (fmt.lora(lora),) if lora is not None else ()
    keys: dict[int, tuple[Any, ...]] = {}
    tagged = fmt is KeyFormat.TAGGED
    bare = fmt is KeyFormat.IDENTIFIER
    for item in mm_items:
        offset = item.offset
        identity = item.identity
        for b in range(offset // block_size, (offset + item.length - 1) // block_size + 1):
            # KeyFormat.media inlined: this loop runs once per media block at every admission.
            rel = offset - b * block_size
            key = ("mm", identity, rel) if tagged else (identity if bare else (identity, rel))
            prior = keys.get(b)
            keys[b] = (*base, key) if prior is None else (*prior, key)
    if cache_salt:
        keys[0] = (*keys.get(0, base), fmt.salt(cache_salt))
    return keys, (base or None)


def event_extra_keys(extra: ExtraKeys, fmt: KeyFormat = KeyFormat.TAGGED) -> list[Any] | None:
    """A block's extra keys as its generation's KV events carry them: untagged for ``tagged``
    (LoRA name, ``(identifier, offset)``, salt), the hash input itself otherwise."""
    if extra is None:
        return None
    if fmt is not KeyFormat.TAGGED:
        return list(extra)
    out: list[Any] = []
    for key in extra:
        tag = key[0]
        if tag == "mm":
            out.append((key[1], key[2]))
        else:  # ("lora", name, path) -> name; ("cache_salt", salt) -> salt
            out.append(key[1])
    return out


class BlockHasher:
    """Chained block keys for one algorithm, seed, block size and extra-key generation."""

    __slots__ = ("algo", "block_size", "fn", "key_format", "none_hash", "seed")

    def __init__(
        self,
        algo: str = "sha256",
        block_size: int = 16,
        seed: str | None = None,
        key_format: KeyFormat | str = KeyFormat.TAGGED,
    ) -> None:
        if block_size <= 0:
            raise ValueError("block_size must be positive")
        self.algo = algo
        self.fn = hash_function(algo)
        self.block_size = block_size
        try:
            self.key_format = KeyFormat(key_format)
        except ValueError:
            choices = ", ".join(f.value for f in KeyFormat)
            raise ValueError(f"unknown block key format {key_format!r}; choose one of {choices}") from None
        self.seed = vllm_seed(algo) if seed is None else seed
        self.none_hash = self.fn(self.seed)

    def hash_block(self, parent: BlockHash | None, tokens: tuple[int, ...], extra: ExtraKeys) -> BlockHash:
        return self.fn((self.none_hash if parent is None else parent, tokens, extra))

    def block_hashes(
        self,
        token_ids: Sequence[int],
        mm_items: Sequence[MediaSpanLike] = (),
        cache_salt: str | None = None,
        lora: LoRA | None = None,
    ) -> list[BlockHash]:
        """Keys of every full block of a sequence, first block first (the hot path of admission:
        one tuple and one hash per block)."""
        bs = self.block_size
        fn = self.fn
        prev = self.none_hash
        if mm_items or cache_salt or lora is not None:
            extras, default = extra_keys_by_block(
                bs, mm_items, cache_salt or None, lora=lora, fmt=self.key_format
            )
        else:
            extras, default = {}, None
        get_extra = extras.get
        out: list[BlockHash] = []
        append = out.append
        for b in range(len(token_ids) // bs):
            start = b * bs
            prev = fn((prev, tuple(token_ids[start : start + bs]), get_extra(b, default)))
            append(prev)
        return out
