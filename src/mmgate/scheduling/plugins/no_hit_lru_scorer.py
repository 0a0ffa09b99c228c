"""``no-hit-lru-scorer``: spread *cold* requests (no prefix hit anywhere) over the endpoints that
took a cold request least recently, so new cache content grows evenly across the fleet.

Never-used endpoints score highest (1.0 falling by 1/(n−1) per rank), then endpoints by how long
ago they last took a cold request. A warm request (some endpoint holds part of its prefix) gets a
neutral 0.5 everywhere and does not touch the LRU.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import msgspec

from mmgate.scheduling.contracts import EndpointAware, PluginHandle, Scorer
from mmgate.scheduling.keys import PREFIX_MATCH, PrefixMatch
from mmgate.scheduling.lifecycle import PreRequest
from mmgate.scheduling.types import DataKey, EndpointState, SchedulingRequest, SchedulingResult

PREFILL_PROFILE = "prefill"


class NoHitLRUParams(msgspec.Struct, forbid_unknown_fields=True):
    lruSize: int = 1024
    prefixMatchInfoProducerName: str = ""
    prefixPluginType: str = ""  # deprecated in llm-d, never used
    prefixPluginName: str = ""  # deprecated in llm-d, never used


class NoHitLRUScorer(Scorer[NoHitLRUParams], PreRequest, EndpointAware):
    type_name = "no-hit-lru-scorer"

    def __init__(self, name: str, params: NoHitLRUParams, handle: PluginHandle) -> None:
        super().__init__(name, params, handle)
        self._size = params.lruSize if params.lruSize > 0 else 1024
        self._lru: OrderedDict[str, None] = OrderedDict()  # oldest first
        self._key: DataKey[PrefixMatch] = PREFIX_MATCH.scoped(params.prefixMatchInfoProducerName)
        self._cold: DataKey[bool] = DataKey(f"no-hit-lru-cold@{name}")

    def consumes(self) -> tuple[DataKey[Any], ...]:
        return (self._key,)

    def score(self, request: SchedulingRequest, endpoints: list[EndpointState]) -> list[float]:
        info = request.get(self._key)
        cold = info is None or not any(info.matched.get(ep.name, 0) > 0 for ep in endpoints)
        request.put(self._cold, cold)
        n = len(endpoints)
        if not cold:
            return [0.5] * n
        if n == 1:
            return [1.0]
        position = {name: i for i, name in enumerate(self._lru)}
        never = [i for i, ep in enumerate(endpoints) if ep.name not in position]
        out = [0.0] * n
        for rank, i in enumerate(never):
            out[i] = 1.0 - rank / (n - 1)
        for i, ep in enumerate(endpoints):
            pos = position.get(ep.name)
            if pos is not None:
                out[i] = max(0.0, 1.0 - (len(never) + pos) / (n - 1))
        return out

    def _touch(self, name: str) -> None:
        self._lru.pop(name, None)
        self._lru[name] = None
        while len(self._lru) > self._size:
            self._lru.popitem(last=False)

    def pre_request(self, request: SchedulingRequest, result: SchedulingResult, now: float) -> None:
        if not request.get(self._cold):
            return
        for profile in (result.primary_profile, PREFILL_PROFILE):
            targets = result.targets_of(profile)
            if targets:
                self._touch(targets[0].name)

    def remove_endpoint(self, name: str) -> None:
        self._lru.pop(name, None)
