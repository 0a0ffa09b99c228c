"""The API server in front of the engine: per media item it loads the payload (base64 decode,
content hash, image decode; :mod:`mmgate.sim.engine.media`) and runs the HF processor unless the
processor cache holds the item. One process per pod does this for every request, cache hits
included, on its own worker(s) beside the GPU's step loop (vLLM runs it inline in the API
server, one request at a time), so under load requests queue here before the engine sees them."""

from __future__ import annotations

from collections.abc import Mapping

from mmgate.sim.engine.caches import ProcessorCache
from mmgate.sim.engine.media import load_ms
from mmgate.sim.engine.timing import Noise
from mmgate.sim.engine.types import SimRequest
from mmgate.sim.profiles import MediaLoad, Poly, Preprocess


class Frontend:
    """Front-end time per request, with the processor cache's hit/query counters. ``by_modality``:
    (processor time, processed bytes per token) replacing ``profile``'s for items of a modality."""

    __slots__ = ("by_modality", "cache", "hits", "load", "noise", "profile", "queries", "workers")

    def __init__(
        self,
        profile: Preprocess,
        load: MediaLoad,
        cache_gb: float,
        workers: int,
        noise: Noise,
        by_modality: Mapping[str, tuple[Poly, int]] | None = None,
    ) -> None:
        self.profile = profile
        self.by_modality = dict(by_modality or {})
        self.load = load
        self.cache = ProcessorCache(int(cache_gb * (1 << 30))) if cache_gb > 0 else None
        self.workers = [0.0] * max(1, workers)
        self.noise = noise
        self.queries = 0
        self.hits = 0

    def work_ms(self, request: SimRequest) -> float:
        """Milliseconds of front-end work ``request`` needs (without noise or queueing): loading
        every media payload, then the processor for each item the processor cache misses (the
        lookup stores the item, so a second call for the same item hits)."""
        pre = self.profile
        ms = pre.per_request_ms
        load = self.load
        for payload in request.media:
            ms += load_ms(load, payload)
        proc = self.cache
        by_modality = self.by_modality
        for item in request.mm_items:
            poly: Poly = pre
            size = pre.bytes_per_token
            if by_modality:
                poly, size = by_modality.get(getattr(item, "modality", "image"), (pre, size))
            if proc is not None:
                self.queries += 1
                if proc.lookup(item.identity, item.length * size):
                    self.hits += 1
                    continue
            ms += poly.ms(item.length)
        return ms

    def preprocess(self, request: SimRequest, now: float) -> float:
        """Seconds from ``now`` until ``request`` has been through the front end and may be added:
        its :meth:`work_ms`, queued on the front end's worker(s), so a burst of arrivals waits in
        line as on a real API server."""
        seconds = self.noise.jitter(self.work_ms(request)) / 1000.0
        workers = self.workers
        i = min(range(len(workers)), key=workers.__getitem__)
        done = max(now, workers[i]) + seconds
        workers[i] = done
        return done - now
