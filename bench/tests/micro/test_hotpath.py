"""The in-process hot-path benchmark: it runs every stage end to end and reports sane figures."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mmgate_bench.cli import main as bench
from mmgate_bench.micro import hotpath
from support.otlp import OtlpReceiver


def test_every_stage_is_timed_and_written(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "hotpath.json"
    code = bench(
        ["hotpath", "--configs", "round-robin,aggregated", "--bodies", "text", "--iterations", "20",
         "--repeats", "2", "--json", str(out)]
    )  # fmt: skip
    assert code == 0
    doc = json.loads(out.read_text())
    assert [c["config"] for c in doc["cases"]] == ["round-robin", "aggregated"]
    for case in doc["cases"]:
        cumulative = case["cumulative_us"]
        assert list(cumulative) == list(hotpath.STAGES)
        assert all(v > 0 for v in cumulative.values())
        assert len(case["runs_us"]["decide"]) == 2
        assert sum(case["stage_us"].values()) == pytest.approx(cumulative["bookkeeping"], abs=0.05)
    table = capsys.readouterr().out
    assert "round-robin" in table and "bookkeeping" in table


def test_the_scheduler_really_routes_in_the_loop() -> None:
    gateway = hotpath.build("round-robin")
    run = hotpath.request_loop(gateway, hotpath.body(hotpath.BODIES["text"]), len(hotpath.STAGES) - 1)
    run(4)
    served = next(iter(gateway.telemetry.requests.collect())).samples
    endpoints = {s.labels["endpoint"] for s in served if s.name.endswith("_total")}
    assert endpoints == set(hotpath.ENDPOINTS)  # round robin over both endpoints
    assert gateway.inflight == 0  # every slot taken was given back


def test_unknown_names_are_refused_with_a_message(capsys: pytest.CaptureFixture[str]) -> None:
    assert bench(["hotpath", "--bodies", "nope"]) == 2
    assert "unknown body 'nope'" in capsys.readouterr().err
    assert bench(["hotpath", "--configs", "no-such-config"]) == 2
    assert "unknown system" in capsys.readouterr().err


def test_with_tracing_the_loop_makes_and_exports_every_request_s_spans() -> None:
    with OtlpReceiver() as otlp:
        gateway = hotpath.build("round-robin", otlp.url)
        assert gateway.tracing is not None
        run = hotpath.request_loop(gateway, hotpath.body(hotpath.BODIES["text"]), len(hotpath.STAGES) - 1)
        run(3)
        assert gateway.tracing.flush()
        gateway.tracing.shutdown()
    roots = otlp.named("POST /v1/chat/completions")
    assert len(roots) == 3 and all(r.attributes["http.response.status_code"] == 200 for r in roots)
    assert sorted(s.name for s in otlp.children(roots[0])) == ["decide", "parse", "upstream"]


def test_a_tracing_ratio_outside_0_to_1_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert bench(["hotpath", "--tracing", "2"]) == 2
    assert "between 0 and 1" in capsys.readouterr().err
