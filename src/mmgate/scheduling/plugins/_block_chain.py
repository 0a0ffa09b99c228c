"""The approximate prefix index's block hash chain: computed lazily, and resumed from a prefix
seen before.

Each block's hash is xxh3_64 of its little-endian uint32 tokens, seeded with the previous block's
hash (the first with xxh3_64 of model ‖ cache salt), so a block's hash stands for everything up to
its end. Two costs are avoided on the decision path:

- **Blocks after the match.** :func:`chain` yields hashes one at a time and records them; the
  lookup stops at the first block nobody holds, and the rest is hashed only when the index is
  updated after the decision.
- **A prefix hashed before.** Requests of one conversation or one document group repeat the
  same system prompt and media and differ in the trailing text. :class:`PrefixChains` remembers
  the chain of recent streams up to the start of that text, keyed by a digest of those bytes
  (xxh3_128, one pass over them in C): a request whose leading bytes are the same starts its
  chain where the earlier one's ended. The key is the content itself, so a hit can only return
  the hashes the blocks would have had anyway (up to a 128-bit collision).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator, Sequence

import xxhash

_hash = xxhash.xxh3_64_intdigest  # (data, seed)
_digest = xxhash.xxh3_128_intdigest

ChainKey = tuple[str, int, int, int]
"""(seed text, block size, blocks, digest of those blocks' bytes)."""


def block_count(n_bytes: int, block_size: int, max_blocks: int) -> int:
    """How many blocks :func:`chain` cuts ``n_bytes`` of stream into (the last may be partial)."""
    if n_bytes <= 0 or block_size <= 0:
        return 0
    step = block_size * 4
    return -(-min(n_bytes, max_blocks * step) // step)


def chain(
    data: bytes,
    block_size: int,
    seed_text: str,
    max_blocks: int,
    out: list[int],
    known: Sequence[int] = (),
) -> Iterator[int]:
    """Hash the blocks of ``data`` after the ``known`` leading ones (their hashes, when
    :class:`PrefixChains` had them) lazily: each hash is appended to ``out`` and yielded, so a
    lookup that stops early leaves the rest unhashed until someone drains the iterator. The
    ``known`` hashes themselves are the caller's to record and look up (in bulk)."""
    if not data or block_size <= 0:
        return
    step = block_size * 4
    if known:
        prev = known[-1]
        begin = len(known) * step
    else:
        prev = _hash(seed_text.encode())
        begin = 0
    append = out.append
    for start in range(begin, min(len(data), max_blocks * step), step):
        prev = _hash(data[start : start + step], prev)
        append(prev)
        yield prev


class PrefixChains:
    """The block hashes of recently seen stream prefixes, least recently used dropped first."""

    def __init__(self, capacity: int = 1024) -> None:
        if capacity <= 0:
            raise ValueError(f"capacity must be > 0, got {capacity}")
        self.capacity = capacity
        self.hits = 0
        self._entries: OrderedDict[ChainKey, tuple[int, ...]] = OrderedDict()

    @staticmethod
    def key(data: bytes, block_size: int, seed_text: str, blocks: int) -> ChainKey:
        """The key of the first ``blocks`` blocks of ``data`` (whole blocks: ``blocks`` × block
        size tokens must lie inside ``data``)."""
        return (seed_text, block_size, blocks, _digest(memoryview(data)[: blocks * block_size * 4]))

    def get(self, key: ChainKey) -> tuple[int, ...] | None:
        found = self._entries.get(key)
        if found is not None:
            self._entries.move_to_end(key)
            self.hits += 1
        return found

    def put(self, key: ChainKey, hashes: Sequence[int]) -> None:
        """Remember the hashes of the key's blocks (``key[2]`` of them, the first of ``hashes``)."""
        entries = self._entries
        entries[key] = tuple(hashes[: key[2]])
        entries.move_to_end(key)
        while len(entries) > self.capacity:
            entries.popitem(last=False)

    def __len__(self) -> int:
        return len(self._entries)
