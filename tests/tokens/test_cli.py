"""`mmgate tokens` and `mmgate cost` as a user runs them (subprocesses for the real entry point)."""

from __future__ import annotations

import argparse
import json
import subprocess
import wave
from pathlib import Path

import pytest
from PIL import Image

from mmgate.tokens import cli, cost_cli, get_family, get_provider
from support.media import mp4
from support.processes import REPO, mmgate_command, subprocess_env

PRICES = REPO / "examples" / "cost" / "prices.yaml"


def run_cli(module: object, *argv: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    parser = argparse.ArgumentParser()
    module.add_arguments(parser)  # type: ignore[attr-defined]
    code = module.run(parser.parse_args(list(argv)))  # type: ignore[attr-defined]
    out = capsys.readouterr()
    return code, out.out, out.err


def test_tokens_json_side_by_side(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    png = tmp_path / "shot.png"
    Image.new("RGB", (1280, 720)).save(png)
    code, out, _ = run_cli(
        cli,
        "1920x1080",
        str(png),
        "--family",
        "qwen3-vl,gemma4",
        "--provider",
        "anthropic",
        "--json",
        capsys=capsys,
    )
    assert code == 0
    rows = json.loads(out)
    assert len(rows) == 6
    by = {(r["input"], r.get("family") or r.get("provider")): r for r in rows}
    shot = by[(str(png), "qwen3-vl")]
    assert (shot["width"], shot["height"], shot["tokens"], shot["extra_tokens"]) == (1280, 720, 880, 2)
    assert (
        by[("1920x1080", "anthropic")]["tokens"] == get_provider("anthropic").image(1920, 1080, None).tokens
    )
    assert by[("1920x1080", "gemma4")]["extra_tokens"] == 2


def test_tokens_param_override(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(
        cli, "1920x1080", "-f", "gemma4", "--param", "max_soft_tokens=1120", "--json", capsys=capsys
    )
    assert code == 0 and json.loads(out)[0]["tokens"] == 1100
    code, out, _ = run_cli(
        cli,
        "1920x1080",
        "-f",
        "qwen3-vl,gemma4",
        "--param",
        "gemma4.max_soft_tokens=70",
        "--json",
        capsys=capsys,
    )
    assert [r["tokens"] for r in json.loads(out)] == [2040, 66]


def test_tokens_video_audio_and_files(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    clip = tmp_path / "clip.wav"
    with wave.open(str(clip), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16_000)
        w.writeframes(bytes(2 * 16_000 * 12))  # 12 s
    code, out, _ = run_cli(
        cli, "1280x720:10s:30fps", str(clip), "-f", "qwen3-vl,qwen2-audio", "--json", capsys=capsys
    )
    assert code == 0
    rows = json.loads(out)
    assert [(r["input"], r["family"]) for r in rows] == [
        ("1280x720:10s:30fps", "qwen3-vl"),
        (str(clip), "qwen2-audio"),
    ]
    assert rows[0]["tokens"] == get_family("qwen3-vl").count_video(1280, 720, 10, 30).tokens
    assert rows[1]["tokens"] == 300 and rows[1]["duration_s"] == pytest.approx(12.0)


def test_tokens_reads_an_mp4_header_and_openai_detail(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    clip = tmp_path / "clip.mp4"
    clip.write_bytes(mp4(1280, 720, 10.0, 30.0))
    code, out, _ = run_cli(cli, str(clip), "-f", "qwen3-vl", "--json", capsys=capsys)
    assert code == 0
    (row,) = json.loads(out)
    assert (row["modality"], row["width"], row["height"]) == ("video", 1280, 720)
    assert row["duration_s"] == pytest.approx(10.0) and row["fps"] == pytest.approx(30.0, rel=0.01)
    assert row["tokens"] == get_family("qwen3-vl").count_video(1280, 720, 10.0, 30.0).tokens
    code, out, _ = run_cli(
        cli, "4096x8192", "-p", "openai:gpt-4o", "--detail", "low", "--json", capsys=capsys
    )
    assert json.loads(out)[0]["tokens"] == 85


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (
            ["1920x1080", "-f", "qwen9"],
            "unknown family 'qwen9' (did you mean 'qwen3-vl'?); valid choices: gemma3",
        ),
        (["1920x1080", "-p", "openai:gpt-9"], "gpt-4o"),
        (["1920x1080", "--param", "max_pixel=5"], "max_pixels"),
        (["1920x1080", "--param", "noequals"], "KEY=VALUE"),
    ],
)
def test_tokens_bad_input_is_a_clear_error(
    argv: list[str], needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run_cli(cli, *argv, capsys=capsys)
    assert code == 2 and out == ""
    assert needle in err


@pytest.mark.parametrize(
    ("bad", "needle"),
    [
        ("0x10", "at least 1 pixel"),
        ("99999x10", "exceeds the maximum"),
        ("nonsense.png", "neither a file nor a size"),
    ],
)
def test_one_bad_input_does_not_hide_the_other_rows(
    bad: str, needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The bad input's row says so, the others print, and the exit status is 2 at the end."""
    code, out, err = run_cli(cli, "1280x720", bad, "640x480", "--format", "tsv", capsys=capsys)
    assert code == 2
    rows = {line.split("\t")[0]: line.split("\t")[1:] for line in out.splitlines()[2:]}
    assert rows["1280x720"] == ["1280x720", "880 (+2)"] and rows["640x480"] == ["640x480", "300 (+2)"]
    assert "error" in " ".join(rows[bad])
    assert err.splitlines() == [next(line for line in err.splitlines() if needle in line)]
    assert err.startswith(f"mmgate tokens: error: {bad}: ")
    code, out, _ = run_cli(cli, bad, "640x480", "--json", capsys=capsys)
    records = json.loads(out)
    assert code == 2 and needle in records[0]["error"] and records[1]["tokens"] == 300


def test_tokens_table_and_list_through_the_real_command() -> None:
    env = subprocess_env(COLUMNS="160")
    out = subprocess.run(
        mmgate_command("tokens", "1280x720", "-f", "qwen3-vl", "--estimate"),
        capture_output=True,
        text=True,
        env=env,
    )
    assert out.returncode == 0, out.stderr
    assert "880 (+2)" in out.stdout and "900" in out.stdout
    every = subprocess.run(
        mmgate_command("tokens", "1920x1080", "-f", "all"), capture_output=True, text=True, env=env
    )
    assert every.returncode == 0 and "phi-4-multimodal" in every.stdout and "3,918" in every.stdout
    listed = subprocess.run(
        mmgate_command("tokens", "--list", "--json"), capture_output=True, text=True, env=env
    )
    names = [r["family"] for r in json.loads(listed.stdout)["families"]]
    assert {"qwen3-vl", "gemma4", "whisper", "phi-4-multimodal"} <= set(names)
    rules = [r["provider"] for r in json.loads(listed.stdout)["providers"]]
    assert {"anthropic", "gemini", "openai:gpt-4o", "openai:gpt-6-astra"} <= set(rules)


def test_cost_json_and_break_even(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(
        cost_cli,
        "--prefix-tokens", "10000", "--question-tokens", "0", "--output-tokens", "0", "--questions", "4",
        "--price-table", str(PRICES), "--model", "claude-sonnet-4", "--json",
        "--per-question",
        capsys=capsys,
    )  # fmt: skip
    assert code == 0
    data = json.loads(out)
    (row,) = data["models"]
    # $3/Mtok: 4 x 10k = $0.12 without; 10k x (1.25 + 3 x 0.1) x $3/M = $0.0465 with 5m entries
    assert row["without_cache"] == pytest.approx(0.12)
    assert row["with_cache_5m"] == pytest.approx(0.0465)
    assert row["with_cache_1h"] == pytest.approx(10_000 * (2.0 + 0.3) * 3 / 1e6)
    assert (row["break_even_5m"], row["break_even_1h"]) == (2, 3)
    first = data["per_question"]["claude-sonnet-4"][0]
    assert first["with_cache_5m"] > first["without_cache"]  # the first question pays the write premium


def test_cost_table_through_the_real_command() -> None:
    out = subprocess.run(
        mmgate_command(
            "cost",
            "--prefix-tokens",
            "12000",
            "--questions",
            "5",
            "--price-table",
            "examples/cost/prices.yaml",
        ),
        capture_output=True,
        text=True,
        env=subprocess_env(),
        cwd=REPO,
    )
    assert out.returncode == 0, out.stderr
    assert "claude-sonnet-4" in out.stdout and "n ≥ 2" in out.stdout


@pytest.mark.parametrize(
    ("table", "needle"),
    [
        ("models: {m: {input: 1}}", "needs 'output'"),
        ("models: {m: {input: 1, output: 2, cache_reed: 0.1}}", "cache_read"),
        ("models: {m: {input: -1, output: 2}}", "non-negative"),
        ("prices: {}", "'models'"),
        (":\n  - [", "not valid YAML"),
    ],
)
def test_cost_bad_price_tables(
    table: str, needle: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "prices.yaml"
    path.write_text(table)
    code, _, err = run_cli(cost_cli, "--prefix-tokens", "10", "--price-table", str(path), capsys=capsys)
    assert code == 2 and needle in err


def test_cost_unknown_model_lists_valid(capsys: pytest.CaptureFixture[str]) -> None:
    table = str(PRICES)
    code, _, err = run_cli(
        cost_cli, "--prefix-tokens", "10", "--price-table", table, "--model", "gpt-9", capsys=capsys
    )
    assert code == 2 and "claude-sonnet-4" in err


def test_cost_rejects_negative_counts(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(cost_cli, "--prefix-tokens", "-5", capsys=capsys)
    assert code == 2 and "prefix_tokens" in err


def test_the_shipped_price_table_covers_every_hosted_model_tokens_prices() -> None:
    from mmgate.tokens.cost import load_price_table
    from mmgate.tokens.providers import OPENAI_MODELS, hosted_rules

    table = load_price_table(PRICES)
    assert table.read is not None and table.read.startswith("20")  # the date the prices were read
    assert set(OPENAI_MODELS) <= set(table.models)
    rules = {get_provider(name).name for name in table.models}  # every row is a name tokens takes
    listed = {r["provider"] for r in hosted_rules()}  # what mmgate tokens --list shows
    assert rules == listed == {"anthropic", "gemini", *(f"openai:{m}" for m in OPENAI_MODELS)}


def test_cost_finds_models_as_users_write_them(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(
        cost_cli, "--prefix-tokens", "10", "--model", "Claude-Sonnet-4-5-20250929", "--json", capsys=capsys
    )
    assert code == 0 and [m["model"] for m in json.loads(out)["models"]] == ["claude-sonnet-4-5"]
