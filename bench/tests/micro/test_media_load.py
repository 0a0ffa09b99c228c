"""The media-load benchmark fits the simulator's front-end constants from what it measured."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mmgate_bench.cli import main as bench
from mmgate_bench.micro.media_load import MIB, fit


def test_fit_recovers_linear_costs() -> None:
    rows = []
    for fmt, rate in (("jpeg", 6.0), ("png", 20.0)):
        for mpx in (0.1, 0.5, 1.0, 2.0):
            file_bytes = int(mpx * MIB)
            rows.append(
                {
                    "format": fmt,
                    "width": int(mpx * 1e6),
                    "height": 1,
                    "file_bytes": file_bytes,
                    "base64_bytes": file_bytes * 4 // 3,
                    "bytes_per_pixel": file_bytes / (mpx * 1e6),
                    "base64_ms": 0.1 * file_bytes * 4 / 3 / MIB,
                    "blake3_ms": 0.3 * file_bytes / MIB,
                    "decode_ms": 0.5 + rate * mpx,
                }
            )
    got = fit(rows)
    assert got["base64_ms_per_mib"] == pytest.approx(0.1, rel=1e-3)
    assert got["hash_ms_per_mib"] == pytest.approx(0.3, rel=1e-3)
    assert got["decode_ms_per_megapixel"] == pytest.approx({"jpeg": 6.0, "png": 20.0}, rel=1e-3)
    assert got["per_item_ms"] == pytest.approx(0.5, abs=1e-3)
    assert got["other_decode_ms_per_megapixel"] == pytest.approx(20.0, rel=1e-3)


def test_benchmark_times_real_files_and_writes_json(tmp_path: Path) -> None:
    out = tmp_path / "media-load.json"
    assert bench(["media-load", "--repeats", "1", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    formats = {r["format"] for r in report["rows"]}
    assert formats == {"jpeg", "png"}
    big = max(report["rows"], key=lambda r: r["width"] * r["height"])
    small = min(report["rows"], key=lambda r: r["width"] * r["height"])
    assert big["decode_ms"] > small["decode_ms"] > 0
    assert set(report["fit"]["decode_ms_per_megapixel"]) == formats


def test_bad_repeats_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert bench(["media-load", "--repeats", "0"]) == 2
    assert "--repeats" in capsys.readouterr().err
