"""``weighted-random-picker``: choose with probability proportional to score (A-Res sampling:
key = U^(1/score), largest keys win). All-zero scores fall back to a uniform choice."""

from __future__ import annotations

from mmgate.scheduling.plugins._picking import BasePicker
from mmgate.scheduling.types import EndpointState


class WeightedRandomPicker(BasePicker):
    type_name = "weighted-random-picker"

    def pick(self, endpoints: list[EndpointState], scores: list[float]) -> list[EndpointState]:
        rng = self._rng
        k = min(self._k, len(endpoints))
        if not any(s > 0 for s in scores):
            return rng.sample(endpoints, k)
        keys = []
        for i, s in enumerate(scores):
            if s <= 0:
                keys.append((0.0, i))
                continue
            u = rng.random() or 1e-10
            keys.append((u ** (1.0 / s), i))
        keys.sort(reverse=True)
        return [endpoints[i] for _, i in keys[:k]]
