"""A scheduling profile: one named Filter → Score → Pick pipeline (llm-d's SchedulingProfile).

Scores are clamped to [0, 1], multiplied by the scorer's weight and summed in scorer order. When
the scheduler was built with a :class:`~mmgate.scheduling.contracts.PluginTimer`, the runs it asks
to be timed hand each plugin's processing time to it (GIE records the same per plugin, so a slow
plugin shows by name).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from time import perf_counter
from typing import Any

from mmgate.scheduling._weights import add_weighted, weighted
from mmgate.scheduling.contracts import Filter, Picker, PluginTimer, Scorer
from mmgate.scheduling.types import EndpointState, NoEndpointsError, ProfileResult, SchedulingRequest

Seconds = Callable[[float], None]


@dataclass(slots=True)
class WeightedScorer:
    scorer: Scorer[Any]
    weight: float


class Profile:
    """A named Filter → Score → Pick pipeline."""

    def __init__(
        self, name: str, filters: list[Filter[Any]], scorers: list[WeightedScorer], picker: Picker[Any]
    ) -> None:
        self.name = name
        self.filters = filters
        self.scorers = scorers
        self.picker = picker
        self._timed: tuple[list[Seconds], list[Seconds], Seconds] | None = None

    def time_plugins(self, timer: PluginTimer) -> None:
        """Hand every plugin's processing time to ``timer`` from now on."""
        self._timed = (
            [timer("filter", f) for f in self.filters],
            [timer("scorer", ws.scorer) for ws in self.scorers],
            timer("picker", self.picker),
        )

    def run(
        self, request: SchedulingRequest, endpoints: Sequence[EndpointState], timed_run: bool = False
    ) -> ProfileResult | None:
        """The profile's result for ``request``; ``timed_run``: time each plugin (when a timer is set)."""
        timed = self._timed if timed_run else None
        candidates = list(endpoints)
        for i, f in enumerate(self.filters):
            if not candidates:
                break
            if timed is None:
                candidates = f.filter(request, candidates)
            else:
                started = perf_counter()
                candidates = f.filter(request, candidates)
                timed[0][i](perf_counter() - started)
        if not candidates:
            return None
        n = len(candidates)
        totals: list[float] | None = None
        by_scorer: dict[str, list[float]] | None = {} if request.debug else None
        for i, ws in enumerate(self.scorers):
            if timed is None:
                raw = ws.scorer.score(request, candidates)
            else:
                started = perf_counter()
                raw = ws.scorer.score(request, candidates)
                timed[1][i](perf_counter() - started)
            if len(raw) != n:
                raise ValueError(f"scorer {ws.scorer.name!r} gave {len(raw)} scores for {n} endpoints")
            # Clamped, weighted and summed in scorer order (mmgate.scheduling._weights, compiled).
            totals = weighted(raw, ws.weight) if totals is None else add_weighted(totals, raw, ws.weight)
            if by_scorer is not None:
                by_scorer[ws.scorer.name] = list(raw)
        if totals is None:
            totals = [0.0] * n
        if timed is None:
            targets = self.picker.pick(candidates, totals)
        else:
            started = perf_counter()
            targets = self.picker.pick(candidates, totals)
            timed[2](perf_counter() - started)
        return ProfileResult(targets, candidates, totals, by_scorer)


def no_target(profile: str) -> NoEndpointsError:
    return NoEndpointsError(f"no endpoint passed the filters of profile {profile!r}")
