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
        # The same pipeline with each plugin wrapped in a stopwatch (time_plugins); a timed run
        # takes these lists, so an untimed one pays nothing for the timing.
        self._timed: tuple[list[Filter[Any]], list[WeightedScorer], Picker[Any]] | None = None

    def time_plugins(self, timer: PluginTimer) -> None:
        """Let a timed :meth:`run` hand every plugin's processing time to ``timer``."""
        self._timed = (
            [_TimedFilter(f, timer("filter", f)) for f in self.filters],
            [
                WeightedScorer(_TimedScorer(ws.scorer, timer("scorer", ws.scorer)), ws.weight)
                for ws in self.scorers
            ],
            _TimedPicker(self.picker, timer("picker", self.picker)),
        )

    def run(
        self, request: SchedulingRequest, endpoints: Sequence[EndpointState], timed_run: bool = False
    ) -> ProfileResult | None:
        """The profile's result for ``request``; ``timed_run``: time each plugin (when a timer is set)."""
        timed = self._timed
        if timed_run and timed is not None:
            filters, scorers, picker = timed
        else:
            filters, scorers, picker = self.filters, self.scorers, self.picker
        candidates = list(endpoints)
        for f in filters:
            if not candidates:
                break
            candidates = f.filter(request, candidates)
        if not candidates:
            return None
        n = len(candidates)
        totals: list[float] | None = None
        by_scorer: dict[str, list[float]] | None = {} if request.debug else None
        for ws in scorers:
            raw = ws.scorer.score(request, candidates)
            if len(raw) != n:
                raise ValueError(f"scorer {ws.scorer.name!r} gave {len(raw)} scores for {n} endpoints")
            # Clamped, weighted and summed in scorer order (mmgate.scheduling._weights, compiled).
            totals = weighted(raw, ws.weight) if totals is None else add_weighted(totals, raw, ws.weight)
            if by_scorer is not None:
                by_scorer[ws.scorer.name] = list(raw)
        if totals is None:
            totals = [0.0] * n
        return ProfileResult(picker.pick(candidates, totals), candidates, totals, by_scorer)


class _TimedFilter(Filter[Any]):
    """``inner`` with each call's seconds handed to ``seconds``."""

    def __init__(self, inner: Filter[Any], seconds: Seconds) -> None:
        super().__init__(inner.name, inner.params, inner.handle)
        self.inner, self.seconds = inner, seconds

    def filter(self, request: SchedulingRequest, endpoints: list[EndpointState]) -> list[EndpointState]:
        started = perf_counter()
        kept = self.inner.filter(request, endpoints)
        self.seconds(perf_counter() - started)
        return kept


class _TimedScorer(Scorer[Any]):
    """``inner`` with each call's seconds handed to ``seconds``."""

    def __init__(self, inner: Scorer[Any], seconds: Seconds) -> None:
        super().__init__(inner.name, inner.params, inner.handle)
        self.inner, self.seconds = inner, seconds

    def score(self, request: SchedulingRequest, endpoints: list[EndpointState]) -> list[float]:
        started = perf_counter()
        scores = self.inner.score(request, endpoints)
        self.seconds(perf_counter() - started)
        return scores


class _TimedPicker(Picker[Any]):
    """``inner`` with each call's seconds handed to ``seconds``."""

    def __init__(self, inner: Picker[Any], seconds: Seconds) -> None:
        super().__init__(inner.name, inner.params, inner.handle)
        self.inner, self.seconds = inner, seconds

    def pick(self, endpoints: list[EndpointState], scores: list[float]) -> list[EndpointState]:
        started = perf_counter()
        targets = self.inner.pick(endpoints, scores)
        self.seconds(perf_counter() - started)
        return targets


def no_target(profile: str) -> NoEndpointsError:
    return NoEndpointsError(f"no endpoint passed the filters of profile {profile!r}")
