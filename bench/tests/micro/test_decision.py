"""The decision benchmark runs end to end on a tiny workload and writes its raw JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mmgate_bench.cli import main
from support.processes import REPO


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
    epd = data["epd"]  # the four-image E/P/D case, routing headers included, on 4 E + 4 P + 8 D
    assert (epd["config"], epd["fleet"], epd["images"], epd["decisions"]) == ("e-p-d", "4E/4P/8D", 4, 30)
    assert epd["request_tokens"] > 3600  # four 900-token images plus text
    assert data["params"]["epd_fleet"] == [4, 4, 8] and data["params"]["clock"].startswith("wall")


def test_the_e_p_d_case_takes_its_fleet_and_the_cpu_clock(tmp_path: Path) -> None:
    out = tmp_path / "decision.json"
    args = [
        "--config",
        str(REPO / "examples/round-robin.yaml"),
        "--groups",
        "1",
        "--per-group",
        "2",
        "--rounds",
        "10",
    ]
    assert main(["decision", *args, "--epd-fleet", "1,1,2", "--cpu-time", "--out", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["epd"]["fleet"] == "1E/1P/2D" and data["params"]["clock"] == "thread CPU time"


def test_a_bad_e_p_d_fleet_is_a_message_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["decision", "--epd-fleet", "4,8"])
    assert exited.value.code == 2
    assert "three pod counts E,P,D" in capsys.readouterr().err
