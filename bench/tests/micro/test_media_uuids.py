"""The media-uuid micro-benchmark runs end to end: both methods give the same JSON, and every
figure it reports is there."""

import json
from pathlib import Path

from mmgate_bench.cli import main as bench


def test_media_uuids_benchmark_runs_and_writes_json(tmp_path: Path) -> None:
    out = tmp_path / "media-uuids.json"
    assert bench(["media-uuids", "--sizes", "1", "--rounds", "2", "--out", str(out)]) == 0
    (row,) = json.loads(out.read_text())["results"]
    assert 0.9e6 < row["body_bytes"] < 1.2e6 and row["uuids_written"] == 3
    assert set(row["median_ms"]) == {"splice", "splice, joined", "re-serialise (orjson)", "parse (for scale)"}
    assert all(len(v) == 2 for v in row["samples_ms"].values())
    assert row["peak_bytes"]["splice"] < row["body_bytes"] // 100  # pieces of the body: no copy of it
    assert row["peak_bytes"]["splice, joined"] > row["body_bytes"]  # joined: one new body, no more


def test_bad_flags_exit_2(tmp_path: Path) -> None:
    assert bench(["media-uuids", "--rounds", "0", "--out", str(tmp_path / "x.json")]) == 2
