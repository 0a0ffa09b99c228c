"""The pricing micro-benchmark runs end to end and reports every rule it times."""

import json
from pathlib import Path

from mmgate_bench.cli import main as bench


def test_pricing_benchmark_runs_and_writes_json(tmp_path: object) -> None:
    out = Path(str(tmp_path)) / "pricing.json"
    assert bench(["pricing", "--images", "2", "--repeats", "1", "--inner", "2", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    rules = {r["rule"] for r in report["results"]}
    assert {"qwen3-vl", "llm-d estimate", "anthropic"} <= rules
    assert all(r["new sizes: price"] > 0 for r in report["results"])
