"""``random-picker``: uniform choice among the candidates, ignoring scores (a baseline)."""

from __future__ import annotations

from mmgate.scheduling.plugins._picking import BasePicker
from mmgate.scheduling.types import EndpointState


class RandomPicker(BasePicker):
    type_name = "random-picker"

    def pick(self, endpoints: list[EndpointState], scores: list[float]) -> list[EndpointState]:
        if self._k == 1:
            return [endpoints[self._rng.randrange(len(endpoints))]]
        return self._rng.sample(endpoints, min(self._k, len(endpoints)))
