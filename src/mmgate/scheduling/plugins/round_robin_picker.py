"""``round-robin-picker`` (mmgate's own): take the candidates in turn, ignoring scores.

This is the baseline a Kubernetes Service gives, so benchmarks can compare against it with the
same gateway in the path. The turn advances per decision, over the candidate list in the order
the data layer gives it.
"""

from __future__ import annotations

from mmgate.scheduling.plugins._picking import BasePicker
from mmgate.scheduling.types import EndpointState


class RoundRobinPicker(BasePicker):
    type_name = "round-robin-picker"

    _turn = 0

    def pick(self, endpoints: list[EndpointState], scores: list[float]) -> list[EndpointState]:
        n = len(endpoints)
        start = self._turn % n
        self._turn = start + 1
        if self._k == 1:
            return [endpoints[start]]
        return [endpoints[(start + j) % n] for j in range(min(self._k, n))]
