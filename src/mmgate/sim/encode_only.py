"""The work of an encode-only pod (``--mm-encoder-only``): preprocess and encode media, nothing else.

vLLM's encoder-only instance allocates no KV cache and skips the language model. The vision encoder
does not speed up with batching (the profiles' calibration: about 6 images/s at 672x448 for batch
1 to 16), so items are encoded one request at a time in arrival order, each costing the profile's
preprocessing and encoder time. Outputs are kept in an encoder cache keyed by identity (the EC
producer's store), so a repeated item is neither preprocessed nor encoded again. With
``--mm-encoder-tp-mode data`` each GPU of the replica is a lane that encodes one request's items
while the others encode other requests' (vLLM batches the waiting encoder inputs into one step
and splits them over the GPUs).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections import OrderedDict, deque
from collections.abc import Sequence

from mmgate.sim.engine.types import EngineStats
from mmgate.sim.faults import Faults
from mmgate.sim.profiles import Profile

SPANS_KEPT = 256


class EncodeOnly:
    def __init__(
        self,
        profile: Profile,
        capacity_tokens: int | None = None,
        *,
        mode: str = "weights",
        lanes: int | None = None,
    ) -> None:
        self.profile = profile
        self.encoder, self.lanes = profile.encoder_for(mode, lanes)
        self.capacity = capacity_tokens if capacity_tokens is not None else 1 << 30
        self._cache: OrderedDict[str, int] = OrderedDict()
        self._used = 0
        self._lanes = asyncio.Semaphore(self.lanes)
        self.encoding = 0  # requests on a lane now
        self.queries = 0
        self.hits = 0
        self.encoded_items = 0
        self._spans: deque[tuple[float, float]] = deque(maxlen=SPANS_KEPT)

    def seconds(self, items: Sequence[tuple[str, int]]) -> float:
        """Simulated seconds to encode the items not cached (marks them cached)."""
        pre, enc = self.profile.preprocess, self.encoder
        ms = 0.0
        for identity, tokens in items:
            self.queries += 1
            if identity in self._cache:
                self.hits += 1
                self._cache.move_to_end(identity)
                continue
            ms += pre.ms(tokens) + enc.ms(tokens)
            self.encoded_items += 1
            self._insert(identity, tokens)
        if ms:
            ms += pre.per_request_ms
        return ms / 1000.0

    def _insert(self, identity: str, tokens: int) -> None:
        self._cache[identity] = tokens
        self._used += tokens
        while self._used > self.capacity and len(self._cache) > 1:
            _, size = self._cache.popitem(last=False)
            self._used -= size

    async def encode(self, items: Sequence[tuple[str, int]], faults: Faults, time_scale: float) -> None:
        """Wait for a free lane (one request at a time on each), then for this request's encoding."""
        loop = asyncio.get_running_loop()
        async with self._lanes:
            self.encoding += 1
            started = loop.time()
            try:
                while faults.stalled():
                    await asyncio.sleep(0.05)
                duration = self.seconds(items) * faults.settings.slowdown * time_scale
                if duration > 0:
                    await asyncio.sleep(duration)
            finally:
                self.encoding -= 1
                self._spans.append((started, loop.time()))

    @property
    def spans(self) -> tuple[tuple[float, float], ...]:
        """When the latest requests held a lane, as ``(start, end)`` in the event loop's clock
        (the last ``SPANS_KEPT``): the pod's own record of when it encoded, so a caller can tell
        two pods' encodes overlapped without timing them from outside."""
        return tuple(self._spans)

    def merge_stats(self, stats: EngineStats) -> EngineStats:
        """The engine's snapshot with this encoder's cache counters (its LM side is idle)."""
        return dataclasses.replace(stats, encoder_cache_queries=self.queries, encoder_cache_hits=self.hits)
