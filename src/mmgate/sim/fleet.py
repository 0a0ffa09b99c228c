"""Many simulated pods in one process and one event loop.

The Python API other tests use as a fixture::

    async with SimFleet(pods=2, profile="fast") as fleet:
        fleet.urls          # ["http://127.0.0.1:40123", "http://127.0.0.1:40124"]
        fleet["pod-1"]      # the SimPod: .faults, .metrics, .kv_endpoint, .engine

Ports default to 0 (the OS picks free ones), so parallel test runs never collide.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import msgspec

from mmgate.sim.server import SimPod
from mmgate.sim.spec import PodSpec, expand, load_fleet
from mmgate.vllm.kv_events_config import offset_endpoint


class SimFleet:
    """Start pods from specs, or ``pods`` identical ones from keyword settings (``PodSpec`` fields)."""

    def __init__(
        self,
        specs: Sequence[PodSpec] | None = None,
        *,
        pods: int = 1,
        base_port: int = 0,
        **settings: Any,
    ) -> None:
        if specs is None:
            specs = expand(settings, [], base_port=base_port, pods=pods)
        elif settings:
            raise TypeError("give either specs or keyword settings, not both")
        self.specs = _offset_kv_endpoints(list(specs))
        self.pods: list[SimPod] = []

    @classmethod
    def from_file(cls, path: str | Path, **overrides: Any) -> SimFleet:
        return cls(load_fleet(path, overrides))

    async def start(self) -> None:
        try:
            for spec in self.specs:
                pod = SimPod(spec)
                self.pods.append(pod)
                await pod.start()
        except BaseException:
            await self.stop()
            raise

    async def stop(self) -> None:
        pods, self.pods = self.pods, []
        for pod in reversed(pods):
            with contextlib.suppress(Exception):
                await pod.stop()

    async def __aenter__(self) -> SimFleet:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()

    @property
    def urls(self) -> list[str]:
        return [p.url for p in self.pods]

    @property
    def names(self) -> list[str]:
        return [p.name for p in self.pods]

    def __getitem__(self, name: str) -> SimPod:
        for pod in self.pods:
            if pod.name == name:
                return pod
        raise KeyError(name)

    def __iter__(self) -> Iterator[SimPod]:
        return iter(self.pods)

    def __len__(self) -> int:
        return len(self.pods)

    def by_url(self, url: str) -> SimPod:
        for pod in self.pods:
            if pod.url == url.rstrip("/"):
                return pod
        raise KeyError(url)


def _offset_kv_endpoints(specs: list[PodSpec]) -> list[PodSpec]:
    """Pods sharing one KV-events endpoint get consecutive ports, like vLLM's data-parallel ranks."""
    seen: dict[str, int] = {}
    out: list[PodSpec] = []
    for spec in specs:
        kv = spec.kv_events
        if kv is None or not kv.active:
            out.append(spec)
            continue
        n = seen.get(kv.endpoint, 0)
        seen[kv.endpoint] = n + 1
        if n == 0:
            out.append(spec)
            continue
        replay = None if kv.replay_endpoint is None else offset_endpoint(kv.replay_endpoint, n)
        new_kv = msgspec.structs.replace(kv, endpoint=offset_endpoint(kv.endpoint, n), replay_endpoint=replay)
        out.append(msgspec.structs.replace(spec, kv_events=new_kv))
    return out
