"""The decision benchmark runs end to end on a tiny workload and writes its raw JSON."""

from __future__ import annotations

import json
from pathlib import Path

from mmgate.bench.cli import main


def test_benchmark_writes_results(tmp_path: Path) -> None:
    out = tmp_path / "decision.json"
    args = ["--endpoints", "3", "--groups", "2", "--per-group", "2", "--rounds", "30", "--out", str(out)]
    assert main(["decision", *args]) == 0
    data = json.loads(out.read_text())
    rows = {r["config"]: r for r in data["results"]}
    assert set(rows) == {
        "aggregated",
        "encoder-affinity",
        "round-robin",
        "predicted-ttft @8",
        "predicted-ttft @64",
    }
    assert rows["aggregated"]["decisions"] == 30
    assert rows["aggregated"]["request_tokens"] > 2700  # three 900-token images plus text
    assert 0.3 < rows["aggregated"]["mean_prefix_match_on_target"] < 1.0  # group prefix hits, question misses
    assert rows["round-robin"]["token_producer_median_us"] is None
    # the predicted-TTFT case runs at its own fleet sizes, and times its predictor separately
    assert rows["predicted-ttft @64"]["decisions"] == 30
    assert rows["predicted-ttft @8"]["predictor_median_us"] > 0
