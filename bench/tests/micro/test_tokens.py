"""The token-id micro-benchmark runs end to end on a folder built in the test."""

import json
from pathlib import Path

from mmgate_bench.cli import main as bench
from support.tokenizer_dir import model_dir


def test_tokens_benchmark_runs_and_writes_json(tmp_path: Path) -> None:
    folder = model_dir(tmp_path / "model")
    out = tmp_path / "tokens.json"
    args = [
        "tokens",
        "--tokenizer",
        str(folder),
        "--text-tokens",
        "300",
        "--iterations",
        "2",
        "--repeats",
        "1",
    ]
    assert bench([*args, "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    cases = {c["case"]: c for c in report["cases"]}
    assert set(cases) == {"new chat", "next turn", "next turn + image"}
    assert 250 < cases["new chat"]["engine_tokens"] < 350
    assert cases["next turn + image"]["engine_tokens"] > cases["next turn"]["engine_tokens"] + 200  # 256 pads
    assert set(cases["new chat"]["median_us"]) == {
        "pseudo",
        "engine",
        "engine: render",
        "engine: encode whole",
    }


def test_a_folder_that_cannot_serve_exits_2(tmp_path: Path) -> None:
    assert bench(["tokens", "--tokenizer", str(tmp_path), "--out", str(tmp_path / "t.json")]) == 2
