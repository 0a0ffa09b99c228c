"""Percentiles and medians for every benchmark, in one convention.

**Convention: linear interpolation between the two nearest order statistics** (Hyndman and Fan's
type 7). For ``n`` values sorted as ``v[0] <= ... <= v[n-1]``, the q-th percentile sits at position
``h = (n - 1) * q / 100``; with ``i = floor(h)`` it is ``v[i] + (h - i) * (v[i + 1] - v[i])``. So p0
is the minimum, p100 the maximum and p50 the usual median (the mean of the two middle values when
``n`` is even). It is ``numpy.percentile``'s default and what ``statistics.median`` returns, and it
is what ``vllm bench serve`` reports, so a TTFT p90 printed here compares with vLLM's without a
conversion. With few samples it moves smoothly instead of jumping from one sample to the next as
nearest-rank does.

No values give ``None`` (a report prints a gap, never a made-up zero); :func:`median` raises
instead, for the micro-benchmarks that always have samples.

Weighted samples ``(value, count)`` (the discrete-event mode records inter-token gaps as counts of
equal gaps instead of one float per token) are read as the expanded list, so
``weighted_percentile(pairs, q) == percentile(expanded, q)`` without building the list.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Iterable, Mapping
from itertools import accumulate


def _at(ordered: list[float], q: float) -> float:
    if not 0.0 <= q <= 100.0:
        raise ValueError(f"percentile {q} is outside 0..100")
    h = (len(ordered) - 1) * q / 100.0
    i = math.floor(h)
    if i + 1 >= len(ordered):
        return float(ordered[-1])
    low, high = float(ordered[i]), float(ordered[i + 1])
    return low + (h - i) * (high - low)


def percentile(values: Iterable[float], q: float) -> float | None:
    """The q-th percentile (q in 0..100) of ``values`` in any order; None when there are none."""
    ordered = sorted(values)
    return _at(ordered, q) if ordered else None


def percentiles(values: Iterable[float], qs: Iterable[float]) -> list[float | None]:
    """Several percentiles of one sample, sorting it once."""
    ordered = sorted(values)
    return [_at(ordered, q) if ordered else None for q in qs]


def median(values: Iterable[float]) -> float:
    """The 50th percentile; raises ValueError when there are no values."""
    found = percentile(values, 50)
    if found is None:
        raise ValueError("median of no values")
    return found


def weighted_percentile(pairs: Iterable[tuple[float, int]], q: float) -> float | None:
    """The q-th percentile of ``(value, count)`` pairs read as ``count`` copies of each value."""
    ordered = sorted((float(v), int(c)) for v, c in pairs if c > 0)
    if not ordered:
        return None
    ends = list(accumulate(c for _, c in ordered))  # ends[k]: rank just past the k-th value's copies
    if not 0.0 <= q <= 100.0:
        raise ValueError(f"percentile {q} is outside 0..100")
    h = (ends[-1] - 1) * q / 100.0
    i = math.floor(h)

    def rank(r: int) -> float:
        return ordered[min(bisect_right(ends, r), len(ordered) - 1)][0]

    low = rank(i)
    if i + 1 >= ends[-1]:
        return low
    return low + (h - i) * (rank(i + 1) - low)


def histogram_quantile(q: float, buckets: Mapping[float, float]) -> float | None:
    """The ``q``-quantile (0..1) of a cumulative histogram (upper bound -> count at or below it),
    as Prometheus's ``histogram_quantile`` reads one: interpolated linearly within its bucket from
    the bucket's lower bound (0 for the first); the largest finite bound when the rank falls in the
    ``+Inf`` bucket; None when empty. For a sample's own values use :func:`percentile`."""
    bounds = sorted(buckets)
    if not bounds:
        return None
    total = buckets[bounds[-1]]
    if total <= 0:
        return None
    rank = q * total
    lower, below = 0.0, 0.0
    for le in bounds:
        count = buckets[le]
        if count >= rank:
            if math.isinf(le):
                return lower
            inside = count - below
            return lower + (le - lower) * ((rank - below) / inside if inside > 0 else 1.0)
        lower, below = le, count
    return lower
