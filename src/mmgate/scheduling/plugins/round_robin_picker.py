"""``round-robin-picker`` (mmgate's own): take the candidates in turn, ignoring scores.

This is the baseline a Kubernetes Service gives, so benchmarks can compare against it with the
same gateway in the path. The turn advances per decision, over the candidate list in the order
the data layer gives it.
"""

from __future__ import annotations

from typing import Any

from mmgate.scheduling.framework import Picker, PluginHandle
from mmgate.scheduling.plugins._picking import PickerParams
from mmgate.scheduling.registry import plugin
from mmgate.scheduling.types import EndpointState


@plugin("round-robin-picker")
class RoundRobinPicker(Picker):
    Params = PickerParams

    def __init__(self, name: str, params: Any, handle: PluginHandle) -> None:
        super().__init__(name, params, handle)
        self._k: int = params.maxNumOfEndpoints
        self._turn = 0

    def pick(self, endpoints: list[EndpointState], scores: list[float]) -> list[EndpointState]:
        n = len(endpoints)
        start = self._turn % n
        self._turn += 1
        return [endpoints[(start + j) % n] for j in range(min(self._k, n))]
