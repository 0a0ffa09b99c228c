"""The API server in front of the engine, in vLLM's two stages:

1. **media loading**: each media part's payload is decoded (base64, the image, a clip's frames;
   :mod:`mmgate.sim.core.media`) on a pool of ``load_threads`` threads (vLLM's
   ``global_thread_pool`` in ``vllm/multimodal/media/connector.py``, sized by
   ``VLLM_MEDIA_LOADING_THREAD_COUNT``, 8 by default), so the items of several requests load at
   once;
2. **the multimodal processor**: the content hash and the HF processor on every item the
   processor cache does not hold, on ``workers`` worker(s) (vLLM runs it on one single-thread
   executor, ``_mm_executor`` in ``vllm/renderers/base.py``), in the order the loads finish.

Both stages are paid on cache hits too (the load always, the hash unless the part has a uuid).
A request without media never enters either: vLLM tokenizes on its own pool, so a text-only
request does not wait behind a clip's decode or a spectrogram. Under load, multimodal requests
queue on the processor before the engine sees them.
"""

from __future__ import annotations

from collections.abc import Mapping

from mmgate.sim.core.caches import ProcessorCache
from mmgate.sim.core.media import decode_ms, hash_ms
from mmgate.sim.core.timing import Noise
from mmgate.sim.core.types import SimRequest
from mmgate.sim.profiles import MediaLoad, Poly, Preprocess


class Worker:
    """One thread of the processor stage: jobs take the first idle gap at or after they are
    ready, so a job whose load finished early runs before one still loading, as an executor
    serves them in submission order."""

    __slots__ = ("busy",)

    def __init__(self) -> None:
        self.busy: list[tuple[float, float]] = []  # (start, end) of placed jobs, by start

    def end_if_placed(self, ready: float, seconds: float) -> tuple[int, float]:
        """Where a job ready at ``ready`` would go (index into ``busy``) and when it would end."""
        t = ready
        for i, (start, end) in enumerate(self.busy):
            if t + seconds <= start:
                return i, t + seconds
            if end > t:
                t = end
        return len(self.busy), t + seconds

    def place(self, index: int, end: float, seconds: float) -> None:
        self.busy.insert(index, (end - seconds, end))

    def forget_before(self, now: float) -> None:
        busy = self.busy
        done = 0
        while done < len(busy) and busy[done][1] <= now:
            done += 1
        if done:
            del busy[:done]


class Frontend:
    """Front-end time per request, with the processor cache's hit/query counters. ``by_modality``:
    (processor time, processed bytes per token) replacing ``profile``'s for items of a modality;
    ``loads``: a modality's per-item load work beyond decoding the payload (a clip's frames)."""

    __slots__ = (
        "by_modality",
        "cache",
        "hits",
        "load",
        "loaders",
        "loads",
        "noise",
        "profile",
        "queries",
        "workers",
    )

    def __init__(
        self,
        profile: Preprocess,
        load: MediaLoad,
        cache_gb: float,
        workers: int,
        noise: Noise,
        by_modality: Mapping[str, tuple[Poly, int]] | None = None,
        *,
        load_threads: int = 8,
        loads: Mapping[str, Poly] | None = None,
    ) -> None:
        self.profile = profile
        self.by_modality = dict(by_modality or {})
        self.loads = dict(loads or {})
        self.load = load
        self.cache = ProcessorCache(int(cache_gb * (1 << 30))) if cache_gb > 0 else None
        self.workers = [Worker() for _ in range(max(1, workers))]
        self.loaders = [0.0] * max(1, load_threads)  # when each loading thread is free
        self.noise = noise
        self.queries = 0
        self.hits = 0

    def load_jobs_ms(self, request: SimRequest) -> list[float]:
        """Milliseconds of each media part's load on the loading pool, one job per part: its
        payload decode, plus its modality's own load work for the item it carries (a clip's
        frames; the k-th part of a modality carries the k-th item of it)."""
        load = self.load
        loads = self.loads
        extra: dict[str, list[float]] = {}
        if loads:
            for item in reversed(request.mm_items):
                modality = getattr(item, "modality", "image")
                poly = loads.get(modality)
                if poly is not None:
                    extra.setdefault(modality, []).append(poly.ms(item.length))
        jobs = []
        for payload in request.media:
            ms = decode_ms(load, payload)
            pending = extra.get(payload.modality)
            if pending:
                ms += pending.pop()
            jobs.append(ms)
        return jobs

    def processor_ms(self, request: SimRequest) -> float:
        """Milliseconds of the processor stage (without noise or queueing): hashing every
        payload, then the HF processor for each item the processor cache misses (the lookup
        stores the item, so a second call for the same item hits)."""
        pre = self.profile
        ms = pre.per_request_ms
        load = self.load
        for payload in request.media:
            ms += hash_ms(load, payload)
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
        its parts loaded on the loading pool, then its processor work on the processor worker
        free first after that; 0 for a request without media."""
        if not request.media and not request.mm_items:
            return 0.0
        jitter = self.noise.jitter
        loaded = now
        loaders = self.loaders
        for ms in self.load_jobs_ms(request):
            i = min(range(len(loaders)), key=loaders.__getitem__)
            end = loaders[i] = max(now, loaders[i]) + jitter(ms) / 1000.0
            if end > loaded:
                loaded = end
        seconds = jitter(self.processor_ms(request)) / 1000.0
        if seconds <= 0.0:
            return loaded - now
        best: tuple[float, int, Worker] | None = None
        for worker in self.workers:
            worker.forget_before(now)
            index, end = worker.end_if_placed(loaded, seconds)
            if best is None or end < best[0]:
                best = (end, index, worker)
        assert best is not None
        end, index, worker = best
        worker.place(index, end, seconds)
        return end - now
