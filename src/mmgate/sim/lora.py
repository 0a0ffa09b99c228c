"""LoRA adapter slots of one simulated pod: vLLM's ``--lora-modules`` and ``--max-loras``.

vLLM keeps at most ``max_loras`` adapters in GPU slots; a batch can only hold requests whose
adapters are in a slot. A request for an adapter that is not resident loads it first (a cost in
time before its first token), evicting the least recently used resident adapter that no running
request uses; when every slot is busy with running requests of other adapters, the request waits
until one drains. ``running`` and ``waiting`` are what ``vllm:lora_requests_info`` publishes: the
adapters of the requests running and waiting, as vLLM fills those labels.

Pure bookkeeping (no clock, no I/O): the pod's HTTP handler pays the load time and does the waiting.
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from collections.abc import Mapping


class LoraSlots:
    def __init__(self, modules: Mapping[str, str], max_loras: int, load_s: float) -> None:
        if max_loras < 1:
            raise ValueError(f"max_loras must be at least 1, got {max_loras}")
        self.modules = dict(modules)  # adapter name -> path, as --lora-modules gave them
        self.max_loras = max_loras
        self.load_s = load_s
        self._resident: OrderedDict[str, int] = OrderedDict()  # adapter -> running requests, LRU first
        self._waiting: Counter[str] = Counter()
        self.loads = 0
        self.evictions = 0

    def acquire(self, name: str) -> float | None:
        """Take a slot for one request of adapter ``name``: the seconds its load costs (0 when
        resident), or None when no slot can be had now (every one busy with other adapters)."""
        resident = self._resident
        if name in resident:
            resident[name] += 1
            resident.move_to_end(name)
            return 0.0
        if len(resident) >= self.max_loras:
            idle = next((n for n, users in resident.items() if users == 0), None)
            if idle is None:
                return None
            del resident[idle]
            self.evictions += 1
        resident[name] = 1
        self.loads += 1
        return self.load_s

    def release(self, name: str) -> None:
        """A request of ``name`` finished; its adapter stays resident until evicted."""
        if self._resident.get(name, 0) > 0:
            self._resident[name] -= 1

    def wait(self, name: str, delta: int = 1) -> None:
        """Count a request of ``name`` as waiting for a slot (``delta=-1``: no longer)."""
        self._waiting[name] += delta
        if self._waiting[name] <= 0:
            del self._waiting[name]

    @property
    def resident(self) -> list[str]:
        """Adapters in GPU slots, least recently used first."""
        return list(self._resident)

    @property
    def running(self) -> list[str]:
        return [n for n, users in self._resident.items() if users > 0]

    @property
    def waiting(self) -> list[str]:
        return list(self._waiting)
