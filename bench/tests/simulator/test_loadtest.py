"""The simulator's own benchmark harness: a tiny run so it cannot rot."""

from __future__ import annotations

import json
from pathlib import Path

import imagesize

from mmgate_bench.cli import main as bench
from mmgate_bench.simulator.loadtest import base_png, unique_png


def test_unique_png_is_the_same_picture_with_new_bytes(tmp_path: Path) -> None:
    png = base_png(1280, 720)
    a, b = unique_png(png, 1), unique_png(png, 2)
    assert len({png, a, b}) == 3
    for i, data in enumerate((a, b)):
        path = tmp_path / f"{i}.png"
        path.write_bytes(data)
        assert imagesize.get(str(path)) == (1280, 720)


def test_capacity_run_writes_its_numbers(tmp_path: Path) -> None:
    out = tmp_path / "cap.json"
    args = ["capacity", "--profile", "fast", "--pods", "2", "--rates", "20", "--duration", "0.3"]
    args += ["--pause", "0", "--output-tokens", "4", "--out", str(out)]
    assert bench(["loadtest", *args]) == 0
    doc = json.loads(out.read_text())
    (step,) = doc["steps"]
    assert step["sent"] >= 1 and step["ok"] == step["sent"] and step["errors"] == 0
    assert step["tpot_p50_ms"] is not None and step["ttft_p50_ms"] is not None
    assert doc["pods"] == 2 and doc["images"] == 3
