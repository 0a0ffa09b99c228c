"""The shared-index benchmark: two gateway processes sharing a real Redis, one gateway, and two
without sharing, on the same requests; each case reports the pods' own prefix hit ratio."""

import json
from pathlib import Path

import pytest

from mmgate_bench.cli import main as bench

pytestmark = pytest.mark.slow


def test_shared_index_benchmark_compares_the_three_cases(tmp_path: Path) -> None:
    out = tmp_path / "shared-index.json"
    args = ["--pods", "2", "--groups", "4", "--requests", "24", "--concurrency", "2", "--out", str(out)]
    assert bench(["shared-index", *args]) == 0
    rows = {r["case"]: r for r in json.loads(out.read_text())["results"]}
    assert set(rows) == {"1 gateway", "2 gateways + redis", "2 gateways, no sharing"}
    for row in rows.values():
        assert row["ok"] == 24 and row["failed"] == 0
        assert row["prefix_cache_queries"] > 0 and 0 < row["hit_ratio"] < 1


def test_bad_counts_exit_2(tmp_path: Path) -> None:
    assert bench(["shared-index", "--requests", "0", "--out", str(tmp_path / "x.json")]) == 2
