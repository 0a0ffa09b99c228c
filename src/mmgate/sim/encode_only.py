"""The work of an encode-only pod (``--mm-encoder-only``): load, preprocess and encode media, nothing else.

vLLM's encoder-only instance allocates no KV cache and skips the language model, but its API
server still does what any vLLM API server does with a request's media: it loads every payload
(base64 decode, content hash unless the part carries a ``uuid``, image decode:
:mod:`mmgate.sim.core.media`, cache hits included, since the hash is the cache key) and runs
the HF processor on what it has not processed before. That front end is the pod's CPU work, on its
own worker(s) (``preprocess_workers``, one by default: the API server runs it inline), the same
model a PD pod's front end follows (:class:`mmgate.sim.core.frontend.Frontend`); the GPU's
encoder runs beside it, on the request before.

The vision encoder does not speed up with batching (the profiles' calibration: about 6 images/s at
672x448 for batch 1 to 16), so items are encoded one request at a time in arrival order, each
costing the profile's encoder time. Outputs are kept in an encoder cache keyed by identity (the EC
producer's store), so a repeated item is neither preprocessed nor encoded again (it is still
loaded). With ``--mm-encoder-tp-mode data`` each GPU of the replica is a lane that encodes one
request's items while the others encode other requests' (vLLM batches the waiting encoder inputs
into one step and splits them over the GPUs).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections import OrderedDict, deque
from collections.abc import Sequence

from mmgate.modelserver.stats import EngineStats
from mmgate.sim.core.media import load_ms
from mmgate.sim.core.types import MediaPayload
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
        front_workers: int = 1,
    ) -> None:
        self.profile = profile
        self.encoder, self.lanes = profile.encoder_for(mode, lanes)
        self._by_modality = profile.modality_encoders()  # an omni model's audio tower, say
        self.front_workers = max(1, front_workers)
        self.capacity = capacity_tokens if capacity_tokens is not None else 1 << 30
        self._cache: OrderedDict[str, int] = OrderedDict()
        self._used = 0
        self._front = asyncio.Semaphore(self.front_workers)
        self._lanes = asyncio.Semaphore(self.lanes)
        self.encoding = 0  # requests on a lane now
        self.queries = 0
        self.hits = 0
        self.encoded_items = 0
        self.load_s = 0.0  # simulated seconds the front end spent loading media (hits included)
        self._spans: deque[tuple[float, float]] = deque(maxlen=SPANS_KEPT)

    def work(
        self, items: Sequence[tuple[str, int, str]], media: Sequence[MediaPayload] = ()
    ) -> tuple[float, float]:
        """Simulated seconds of (front end, encoder) for a request's ``(identity, tokens,
        modality)`` items: loading every payload in ``media`` and preprocessing the items not
        cached; encoding those (marks them cached). A modality the profile prices on its own (an
        omni model's audio) costs its own processor and encoder."""
        profile, enc = self.profile, self.encoder
        cost = profile.media_load
        front = sum(load_ms(cost, payload) for payload in media)
        if media:  # a clip's frames are decoded while its part loads, hits included
            loads = profile.modality_loads()
            front += sum(loads[m].ms(tokens) for _, tokens, m in items if m in loads)
        self.load_s += front / 1000.0
        gpu = 0.0
        for identity, tokens, modality in items:
            self.queries += 1
            if identity in self._cache:
                self.hits += 1
                self._cache.move_to_end(identity)
                continue
            front += profile.preprocess_for(modality)[0].ms(tokens)
            gpu += self._by_modality.get(modality, enc).ms(tokens)
            self.encoded_items += 1
            self._insert(identity, tokens)
        if gpu:
            front += profile.preprocess.per_request_ms
        return front / 1000.0, gpu / 1000.0

    def _insert(self, identity: str, tokens: int) -> None:
        self._cache[identity] = tokens
        self._used += tokens
        while self._used > self.capacity and len(self._cache) > 1:
            _, size = self._cache.popitem(last=False)
            self._used -= size

    async def encode(
        self,
        items: Sequence[tuple[str, int, str]],
        faults: Faults,
        time_scale: float,
        media: Sequence[MediaPayload] = (),
    ) -> None:
        """Wait for a front-end worker and its loading and preprocessing, then for a free lane
        (one request at a time on each) and this request's encoding."""
        loop = asyncio.get_running_loop()
        front, gpu = self.work(items, media)
        scale = faults.settings.slowdown * time_scale
        if front > 0:
            async with self._front:
                await asyncio.sleep(front * scale)
        async with self._lanes:
            self.encoding += 1
            started = loop.time()
            try:
                while faults.stalled():
                    await asyncio.sleep(0.05)
                if gpu > 0:
                    await asyncio.sleep(gpu * scale)
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
