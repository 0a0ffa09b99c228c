"""Predicted-TTFT error read from the gateway's histogram (the HTTP mode's source)."""

from __future__ import annotations

import math

import pytest

from mmgate_bench.routing.prediction_metrics import difference, merged, parse_error_buckets
from mmgate_bench.stats import histogram_quantile as quantile

TEXT = """\
# HELP mmgate_ttft_prediction_error_seconds |predicted - observed| time to first token
# TYPE mmgate_ttft_prediction_error_seconds histogram
mmgate_ttft_prediction_error_seconds_bucket{endpoint="a:1",le="0.01"} 2.0
mmgate_ttft_prediction_error_seconds_bucket{endpoint="a:1",le="0.02"} 6.0
mmgate_ttft_prediction_error_seconds_bucket{endpoint="a:1",le="+Inf"} 8.0
mmgate_ttft_prediction_error_seconds_count{endpoint="a:1"} 8.0
mmgate_ttft_prediction_error_seconds_sum{endpoint="a:1"} 0.2
mmgate_ttft_prediction_error_seconds_bucket{endpoint="b:1",le="0.01"} 0.0
mmgate_ttft_prediction_error_seconds_bucket{endpoint="b:1",le="0.02"} 0.0
mmgate_ttft_prediction_error_seconds_bucket{endpoint="b:1",le="+Inf"} 0.0
# TYPE mmgate_observed_ttft_seconds histogram
mmgate_observed_ttft_seconds_bucket{endpoint="a:1",le="+Inf"} 99.0
"""


def test_parse_keeps_only_the_error_histogram_per_endpoint() -> None:
    got = parse_error_buckets(TEXT)
    assert got == {"a:1": {0.01: 2.0, 0.02: 6.0, math.inf: 8.0}, "b:1": {0.01: 0.0, 0.02: 0.0, math.inf: 0.0}}


def test_quantile_interpolates_within_the_bucket_like_histogram_quantile() -> None:
    a = parse_error_buckets(TEXT)["a:1"]
    assert quantile(0.5, a) == pytest.approx(
        0.01 + 0.01 * (4 - 2) / 4
    )  # rank 4 of 8: halfway up (0.01, 0.02]
    assert quantile(0.1, a) == pytest.approx(0.01 * 0.8 / 2)  # inside the first bucket, from 0
    assert quantile(0.95, a) == 0.02  # in +Inf: the largest finite bound
    assert quantile(0.5, {0.01: 0.0, math.inf: 0.0}) is None
    assert quantile(0.5, {}) is None


def test_a_rungs_share_is_the_difference_of_two_scrapes_scaled_to_simulated_seconds() -> None:
    before = {"a:1": {0.01: 1.0, 0.02: 1.0, math.inf: 1.0}, "b:1": {0.01: 3.0, 0.02: 3.0, math.inf: 3.0}}
    after = {
        "a:1": {0.01: 1.0, 0.02: 5.0, math.inf: 5.0},
        "b:1": {0.01: 3.0, 0.02: 3.0, math.inf: 3.0},  # nothing new: dropped
        "c:1": {0.01: 2.0, 0.02: 2.0, math.inf: 2.0},  # first seen in this rung
    }
    rung = difference(after, before, scale=2.0)
    assert rung == {
        "a:1": {0.02: 0.0, 0.04: 4.0, math.inf: 4.0},
        "c:1": {0.02: 2.0, 0.04: 2.0, math.inf: 2.0},
    }
    assert merged(rung) == {0.02: 2.0, 0.04: 6.0, math.inf: 6.0}
    assert quantile(0.5, merged(rung)) == pytest.approx(0.02 + 0.02 * (3 - 2) / 4)
