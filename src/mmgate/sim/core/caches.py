"""The two multimodal caches of a vLLM server: the encoder-output cache (GPU, counted in
embeddings) and the processor cache (CPU, counted in bytes)."""

from __future__ import annotations

from collections import OrderedDict


class EncoderCache:
    """vLLM's ``EncoderCacheManager`` bookkeeping.

    An entry is referenced by the running requests whose prefill still needs it. When the last
    reference goes, the entry stays cached but becomes *freeable*; allocation evicts freeable
    entries oldest-freed first. With ``shared=False`` (mmgate's ``--encoder-cache-tokens 0``)
    unreferenced entries are dropped at once, so nothing is reused across requests.
    """

    __slots__ = ("capacity", "free_slots", "freeable", "freeable_slots", "refs", "shared", "size")

    def __init__(self, capacity: int, shared: bool) -> None:
        self.capacity = capacity
        self.shared = shared
        self.refs: dict[str, set[str]] = {}
        self.size: dict[str, int] = {}
        self.freeable: OrderedDict[str, int] = OrderedDict()
        self.free_slots = capacity
        self.freeable_slots = capacity

    def ensure_capacity(self, tokens: int) -> None:
        """vLLM sizes the cache to at least the largest item; mirror that for any item seen."""
        if tokens > self.capacity:
            grow = tokens - self.capacity
            self.capacity = tokens
            self.free_slots += grow
            self.freeable_slots += grow

    def has(self, key: str) -> bool:
        return key in self.refs

    def add_ref(self, key: str, request_id: str) -> None:
        holders = self.refs[key]
        if not holders:
            self.freeable_slots -= self.freeable.pop(key)
        holders.add(request_id)

    def can_allocate(self, tokens: int, already_planned: int) -> bool:
        """Room for ``tokens`` more embeddings after ``already_planned``; evicts freeable entries
        (oldest freed first) to make it, as vLLM's ``can_allocate`` does."""
        need = tokens + already_planned
        if need <= self.free_slots:
            return True
        if need > self.freeable_slots:
            return False
        while need > self.free_slots:
            key, n = self.freeable.popitem(last=False)
            del self.refs[key]
            del self.size[key]
            self.free_slots += n
        return True

    def allocate(self, key: str, tokens: int, request_id: str) -> None:
        self.refs[key] = {request_id}
        self.size[key] = tokens
        self.free_slots -= tokens
        self.freeable_slots -= tokens

    def release(self, key: str, request_id: str) -> None:
        holders = self.refs.get(key)
        if holders is None or request_id not in holders:
            return
        holders.discard(request_id)
        if holders:
            return
        n = self.size[key]
        if self.shared:
            self.freeable[key] = n
            self.freeable_slots += n
        else:
            del self.refs[key]
            del self.size[key]
            self.free_slots += n
            self.freeable_slots += n

    def used(self) -> int:
        return self.capacity - self.free_slots


class ProcessorCache:
    """An LRU of processed media keyed by identity, bounded in bytes (vLLM's ``lru`` type)."""

    __slots__ = ("capacity", "entries", "used")

    def __init__(self, capacity_bytes: int) -> None:
        self.capacity = capacity_bytes
        self.entries: OrderedDict[str, int] = OrderedDict()
        self.used = 0

    def lookup(self, identity: str, nbytes: int) -> bool:
        """True on a hit (refreshing it); on a miss store the item unless it exceeds the cache."""
        if identity in self.entries:
            self.entries.move_to_end(identity)
            return True
        if nbytes <= self.capacity:
            self.entries[identity] = nbytes
            self.used += nbytes
            while self.used > self.capacity:
                self.used -= self.entries.popitem(last=False)[1]
        return False
