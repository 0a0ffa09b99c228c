"""What the pickers share: llm-d's ``maxNumOfEndpoints`` parameter (default 1)."""

from __future__ import annotations

import msgspec


class PickerParams(msgspec.Struct, forbid_unknown_fields=True):
    maxNumOfEndpoints: int = 1

    def __post_init__(self) -> None:
        if self.maxNumOfEndpoints <= 0:  # llm-d falls back to the default on a bad value
            self.maxNumOfEndpoints = 1
