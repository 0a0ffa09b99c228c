"""The arithmetic of a profile's scores: each scorer's scores clamped to [0, 1], weighted, summed.

Kept apart from :class:`mmgate.scheduling.profile.Profile` so mypyc compiles it
(:mod:`mmgate.compiled`): it is a loop of float operations per candidate and scorer on every
decision, which compiled code runs without the interpreter's per-operation dispatch. The floats
are the same either way: each score clamped (``not s > 0.0`` also maps NaN to 0, as llm-d's
enforceScoreRange does), multiplied by the weight and added in scorer order.
"""

from __future__ import annotations

from collections.abc import Sequence


def weighted(raw: Sequence[float], weight: float) -> list[float]:
    """The first scorer's part of the totals: ``0.0 + clamp(s) * weight`` per candidate (the
    ``0.0 +`` makes a -0.0 product 0.0, as adding it to a zero total does)."""
    return [0.0 + (1.0 if s > 1.0 else s if s > 0.0 else 0.0) * weight for s in raw]


def add_weighted(totals: list[float], raw: Sequence[float], weight: float) -> list[float]:
    """``totals`` with a further scorer's clamped, weighted scores added (a new list; ``raw`` has
    as many scores as ``totals``)."""
    return [
        t + (1.0 if s > 1.0 else s if s > 0.0 else 0.0) * weight for t, s in zip(totals, raw, strict=False)
    ]
