"""The index-scale benchmark runs end to end on tiny sizes and reports every figure it promises."""

import json
from pathlib import Path

from mmgate_bench.cli import main as bench


def test_index_scale_benchmark_runs_and_writes_json(tmp_path: Path) -> None:
    out = tmp_path / "index-scale.json"
    args = ["--sizes", "4096", "--replication", "1", "4", "--endpoints", "8", "--rounds", "1"]
    args += ["--batches", "64", "--decisions", "20", "--out", str(out)]
    assert bench(["index-scale", *args]) == 0
    report = json.loads(out.read_text())
    memory = {m["replication"]: m for m in report["memory"]}
    assert memory[1]["distinct_blocks"] == 4 * memory[4]["distinct_blocks"]
    assert all(m["endpoints"] == 64 and m["tracemalloc_bytes"] > 0 for m in memory.values())
    (sha, xx) = report["lookup"]
    assert (sha["hash_algorithm"], xx["hash_algorithm"]) == ("sha256", "xxhash")
    assert sha["blocks"] == 1024 and sha["endpoints_matching"] == 8  # every endpoint holds a quarter
    assert report["ingest"]["events"] > report["ingest"]["batches"]  # stored + removed per batch
    redis = report["redis"]
    assert redis is not None and redis["paced"]["request_path_round_trips"] == 0
    assert redis["burst"]["writer_round_trips"] < 20  # 20 decisions batched into fewer writes


def test_bad_counts_exit_2(tmp_path: Path) -> None:
    assert bench(["index-scale", "--rounds", "0", "--out", str(tmp_path / "x.json")]) == 2
