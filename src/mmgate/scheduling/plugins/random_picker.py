"""``random-picker``: uniform choice among the candidates, ignoring scores (a baseline)."""

from __future__ import annotations

from typing import Any

from mmgate.scheduling.framework import Picker, PluginHandle
from mmgate.scheduling.plugins._picking import PickerParams
from mmgate.scheduling.registry import plugin
from mmgate.scheduling.types import EndpointState


@plugin("random-picker")
class RandomPicker(Picker):
    Params = PickerParams

    def __init__(self, name: str, params: Any, handle: PluginHandle) -> None:
        super().__init__(name, params, handle)
        self._k: int = params.maxNumOfEndpoints
        self._rng = handle.rng

    def pick(self, endpoints: list[EndpointState], scores: list[float]) -> list[EndpointState]:
        if self._k == 1:
            return [endpoints[self._rng.randrange(len(endpoints))]]
        return self._rng.sample(endpoints, min(self._k, len(endpoints)))
