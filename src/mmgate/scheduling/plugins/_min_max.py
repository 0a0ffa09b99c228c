"""llm-d's min-max normalisation for scorers where less is better (queue length, predicted TTFT)."""

from __future__ import annotations

from collections.abc import Sequence


def lower_is_better(values: Sequence[float | None]) -> list[float]:
    """(max − v) / (max − min) over the known values: the lowest scores 1, the highest 0; all 1
    when every known value is equal. An unknown value (``None``) scores 0."""
    known = [v for v in values if v is not None]
    if len(known) == len(values):
        return lower_is_better_known(known)
    if not known:
        return [0.0] * len(values)
    lo, hi = min(known), max(known)
    if hi == lo:
        return [0.0 if v is None else 1.0 for v in values]
    span = hi - lo
    return [0.0 if v is None else (hi - v) / span for v in values]


def lower_is_better_known(values: Sequence[float]) -> list[float]:
    """:func:`lower_is_better` of values that are all known: the same scores, without a test per
    value (a scorer on the decision path whose every candidate has a value calls this)."""
    if not values:
        return []
    # min() and max() as one loop, the scores by append: at a fleet's few values a C builtin's
    # per-item call and a comprehension's function cost more than the loop (CPython 3.11; the
    # same comparisons in the same order, so the same lo and hi)
    lo = hi = values[0]
    for v in values:
        if v < lo:
            lo = v
        elif v > hi:
            hi = v
    if hi == lo:
        return [1.0] * len(values)
    span = hi - lo
    scores: list[float] = []
    add = scores.append
    for v in values:
        add((hi - v) / span)
    return scores
