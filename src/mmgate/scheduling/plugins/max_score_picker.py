"""``max-score-picker``: the highest total score wins; equal scores are broken at random."""

from __future__ import annotations

from mmgate.scheduling.plugins._picking import BasePicker
from mmgate.scheduling.types import EndpointState


class MaxScorePicker(BasePicker):
    type_name = "max-score-picker"

    def pick(self, endpoints: list[EndpointState], scores: list[float]) -> list[EndpointState]:
        if self._k == 1:
            # One pass: keep the best, replacing it among equals with probability 1/ties
            # (reservoir sampling), which is the uniform tie-break llm-d gets by shuffling.
            best_i = 0
            best = scores[0]
            ties = 1
            rng = self._rng
            for i in range(1, len(scores)):
                s = scores[i]
                if s > best:
                    best, best_i, ties = s, i, 1
                elif s == best:
                    ties += 1
                    if rng.random() * ties < 1.0:
                        best_i = i
            return [endpoints[best_i]]
        order = list(range(len(endpoints)))
        self._rng.shuffle(order)
        order.sort(key=lambda i: -scores[i])
        return [endpoints[i] for i in order[: self._k]]
