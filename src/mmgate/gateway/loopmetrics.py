"""Counters and histograms for the request path of one event loop: no locks, cached children.

prometheus_client's metrics take a lock on every update and stringify and look up their labels on
every ``labels(...)`` call: about 1 µs per metric update, several per request. The gateway updates
its metrics from its event-loop thread and serves ``/metrics`` from that same thread (each worker
is a process of its own), so plain floats suffice. These classes keep prometheus_client's calling
convention (``labels(...).inc()`` / ``.observe()``) and register as collectors producing the very
samples its ``Counter`` and ``Histogram`` would (names, labels, buckets, order).

Not for metrics updated from other threads.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Callable, Iterable, Sequence
from typing import Generic, TypeVar

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

C = TypeVar("C")


class CounterChild:
    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0.0

    def inc(self, amount: float = 1.0) -> None:
        if amount < 0:
            raise ValueError("Counters can only be incremented by non-negative amounts.")
        self.value += amount


class HistogramChild:
    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds  # ascending, +Inf last
        self.counts = [0] * len(bounds)  # per bucket, not cumulative
        self.sum = 0.0

    def observe(self, amount: float) -> None:
        if amount == amount:  # NaN lands in no bucket, as in prometheus_client
            self.counts[bisect_left(self.bounds, amount)] += 1
        self.sum += amount


class _Family(Collector, Generic[C]):
    """A metric and its children by label values (converted to ``str`` once, on first use)."""

    def __init__(
        self,
        name: str,
        documentation: str,
        labelnames: Sequence[str],
        registry: CollectorRegistry | None,
        child: Callable[[], C],
    ) -> None:
        self.name = name
        self.documentation = documentation
        self.labelnames = tuple(labelnames)
        self._new = child
        self._series: dict[tuple[str, ...], C] = {}  # what is exposed, in creation order
        self._lookup: dict[tuple[object, ...], C] = {}  # as callers pass the values
        # An unlabelled metric's one child, reached without a lookup on every update.
        self._single: C | None = None
        if not self.labelnames:
            self._single = self._series[()] = child()
        if registry is not None:
            registry.register(self)

    def labels(self, *values: object) -> C:
        child = self._lookup.get(values)
        if child is None:
            if len(values) != len(self.labelnames):
                raise ValueError("Incorrect label count")
            key = tuple(str(v) for v in values)
            child = self._series.get(key)
            if child is None:
                child = self._series[key] = self._new()
            self._lookup[values] = child
        return child

    def _only(self) -> C:
        if self.labelnames:
            raise ValueError(f"{self.name} has labels: use labels(...) first")
        return self._series[()]

    def describe(self) -> Iterable[Metric]:
        return [self._family()]

    def _family(self) -> Metric:
        raise NotImplementedError


class LoopCounter(_Family[CounterChild]):
    """``prometheus_client.Counter`` for one event-loop thread (exposed as ``<name>_total``)."""

    def __init__(
        self,
        name: str,
        documentation: str,
        labelnames: Sequence[str] = (),
        *,
        registry: CollectorRegistry | None = None,
    ) -> None:
        super().__init__(name, documentation, labelnames, registry, CounterChild)

    def inc(self, amount: float = 1.0) -> None:
        (self._single or self._only()).inc(amount)

    def _family(self) -> CounterMetricFamily:
        return CounterMetricFamily(self.name, self.documentation, labels=self.labelnames)

    def collect(self) -> Iterable[Metric]:
        family = self._family()
        for values, child in self._series.items():
            family.add_metric(values, child.value)
        return [family]


class LoopHistogram(_Family[HistogramChild]):
    """``prometheus_client.Histogram`` for one event-loop thread."""

    def __init__(
        self,
        name: str,
        documentation: str,
        labelnames: Sequence[str] = (),
        *,
        buckets: Sequence[float],
        registry: CollectorRegistry | None = None,
    ) -> None:
        bounds = tuple(sorted(float(b) for b in buckets))
        if not bounds or bounds[-1] != math.inf:
            bounds += (math.inf,)
        self.bounds = bounds
        self._le = [floatToGoString(b) for b in bounds]  # type: ignore[no-untyped-call]
        super().__init__(name, documentation, labelnames, registry, lambda: HistogramChild(bounds))

    def observe(self, amount: float) -> None:
        (self._single or self._only()).observe(amount)

    def _family(self) -> HistogramMetricFamily:
        return HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)

    def collect(self) -> Iterable[Metric]:
        family = self._family()
        for values, child in self._series.items():
            running = 0.0
            buckets = []
            for le, count in zip(self._le, child.counts, strict=True):
                running += count
                buckets.append((le, running))
            family.add_metric(values, buckets, child.sum)
        return [family]
