"""What the pickers share: llm-d's ``maxNumOfEndpoints`` parameter (default 1) and the RNG."""

from __future__ import annotations

import msgspec

from mmgate.scheduling.contracts import Picker, PluginHandle


class PickerParams(msgspec.Struct, forbid_unknown_fields=True):
    maxNumOfEndpoints: int = 1

    def __post_init__(self) -> None:
        if self.maxNumOfEndpoints <= 0:  # llm-d falls back to the default on a bad value
            self.maxNumOfEndpoints = 1


class BasePicker(Picker[PickerParams]):
    def __init__(self, name: str, params: PickerParams, handle: PluginHandle) -> None:
        super().__init__(name, params, handle)
        self._k: int = params.maxNumOfEndpoints
        self._rng = handle.rng
