"""One percentile convention for every benchmark: linear interpolation, numpy's default."""

from __future__ import annotations

import random

import numpy as np
import pytest

from mmgate_bench.stats import median, percentile, percentiles, weighted_percentile


def test_percentiles_interpolate_between_order_statistics() -> None:
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 50) == 50.5  # nearest rank would say 50
    assert percentile(values, 99) == pytest.approx(99.01)
    assert percentile(values, 0) == 1.0 and percentile(values, 100) == 100.0
    assert percentile([7.0], 99) == 7.0
    assert percentile([], 50) is None
    assert percentiles([], (50, 90)) == [None, None]


def test_order_of_the_input_does_not_matter_and_agrees_with_numpy() -> None:
    rng = random.Random(7)
    for n in (1, 2, 3, 10, 101, 1000):
        values = [rng.expovariate(1.0) for _ in range(n)]
        for q in (0, 10, 50, 90, 99, 99.9, 100):
            assert percentile(values, q) == pytest.approx(float(np.percentile(values, q)), rel=1e-12)
        assert percentiles(values, (50, 90)) == [percentile(values, 50), percentile(values, 90)]


def test_median_is_the_fiftieth_percentile_and_refuses_no_values() -> None:
    assert median([4.0, 1.0, 3.0, 2.0]) == 2.5
    with pytest.raises(ValueError):
        median([])


def test_weighted_samples_read_as_the_expanded_list() -> None:
    rng = random.Random(3)
    pairs = [(round(rng.uniform(0, 0.05), 4), rng.randint(1, 40)) for _ in range(30)]
    pairs += [(0.01, 0)]  # a zero count contributes nothing
    expanded = [v for v, c in pairs for _ in range(c)]
    for q in (0, 1, 25, 50, 90, 99, 100):
        assert weighted_percentile(pairs, q) == pytest.approx(percentile(expanded, q), rel=1e-12)
    assert weighted_percentile([], 50) is None
    assert weighted_percentile([(2.0, 1), (1.0, 1)], 50) == 1.5


def test_a_percentile_outside_0_to_100_is_a_mistake() -> None:
    with pytest.raises(ValueError):
        percentile([1.0], 101)
