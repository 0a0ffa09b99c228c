"""The API server's preprocessing in front of the engine: the HF processor per media item, its
processor cache, and the worker(s) that run it (vLLM runs it inline, one request at a time)."""

from __future__ import annotations

from mmgate.sim.engine.caches import ProcessorCache
from mmgate.sim.engine.timing import Noise
from mmgate.sim.engine.types import SimRequest
from mmgate.sim.profiles import Preprocess


class Frontend:
    """Preprocessing time per request, with the processor cache's hit/query counters."""

    __slots__ = ("cache", "hits", "noise", "profile", "queries", "workers")

    def __init__(self, profile: Preprocess, cache_gb: float, workers: int, noise: Noise) -> None:
        self.profile = profile
        self.cache = ProcessorCache(int(cache_gb * (1 << 30))) if cache_gb > 0 else None
        self.workers = [0.0] * max(1, workers)
        self.noise = noise
        self.queries = 0
        self.hits = 0

    def preprocess(self, request: SimRequest, now: float) -> float:
        """Seconds from ``now`` until ``request`` has been preprocessed and may be added.

        Looks every media item up in the processor cache (a hit skips its processing, a miss
        stores it) and queues the work on the frontend's preprocessing worker(s), so a burst
        of arrivals waits in line as on a real API server."""
        pre = self.profile
        ms = pre.per_request_ms
        proc = self.cache
        for item in request.mm_items:
            if proc is not None:
                self.queries += 1
                if proc.lookup(item.identity, item.length * pre.bytes_per_token):
                    self.hits += 1
                    continue
            ms += pre.ms(item.length)
        seconds = self.noise.jitter(ms) / 1000.0
        workers = self.workers
        i = min(range(len(workers)), key=workers.__getitem__)
        done = max(now, workers[i]) + seconds
        workers[i] = done
        return done - now
