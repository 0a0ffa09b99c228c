"""``mmgate bench`` as a user runs it: export, flag validation, plot of a missing folder."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from mmgate_bench.cli import BENCHMARKS
from mmgate_bench.cli import main as bench
from support.processes import mmgate_command, run_without, subprocess_env


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        mmgate_command("bench", *args), capture_output=True, text=True, env=subprocess_env(), timeout=60
    )


def test_export_writes_openai_jsonl(tmp_path: Path) -> None:
    out = tmp_path / "sp.jsonl"
    done = _run("export", "--workload", "shared-prefix", "--groups", "2", "--prompts-per-group", "2",
                "--image-size", "64x48", "--n", "3", str(out))  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = out.read_text().splitlines()
    assert len(lines) == 3
    body = json.loads(lines[0])
    assert body["stream"] is True and body["max_tokens"] == 300
    assert body["messages"][0]["content"][0]["image_url"]["url"].startswith("data:image/jpeg;base64,")


def test_flag_that_does_not_fit_the_workload_is_refused(tmp_path: Path) -> None:
    done = _run("export", "--workload", "image-reuse", "--groups", "3", str(tmp_path / "x.jsonl"))
    assert done.returncode != 0 and "--groups does not apply to workload image-reuse" in done.stderr


def test_plot_without_a_report_says_so(tmp_path: Path) -> None:
    done = _run("plot", str(tmp_path))
    assert done.returncode == 2 and "no report.json" in done.stderr


def test_every_benchmark_explains_itself(capsys: pytest.CaptureFixture[str]) -> None:
    for name in BENCHMARKS:
        with pytest.raises(SystemExit) as exit_:
            bench([name, "--help"])
        assert exit_.value.code == 0
        out = capsys.readouterr().out
        assert out.startswith(f"usage: mmgate bench {name}") and "--" in out, name


def test_the_listing_names_every_benchmark() -> None:
    done = _run("--help")
    assert done.returncode == 0
    for name in BENCHMARKS:
        assert f"    {name} " in done.stdout
    bare = _run()
    assert bare.returncode == 2 and "name a benchmark" in bare.stderr and "hotpath" in bare.stderr


def test_a_benchmark_whose_plotting_library_is_missing_names_the_install() -> None:
    out = run_without(["matplotlib", "numpy"], "bench", "export", "--workload", "image-reuse", "x")
    assert out.returncode == 2
    assert "pip install -e ./bench" in out.stderr and "Traceback" not in out.stderr
