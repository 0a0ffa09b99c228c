"""The ``mmgate`` command as a user runs it: real subprocesses, real pipes, no tracebacks."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from pathlib import Path

import pytest

from mmgate import __version__, compiled
from support.processes import REPO, mmgate_command, run_without, subprocess_env

EXAMPLES = REPO / "examples" / "requests"


def run(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        mmgate_command(*args), capture_output=True, text=True, env=subprocess_env(), timeout=timeout
    )


def piped_into_head(*args: str) -> subprocess.CompletedProcess[str]:
    """``mmgate ARGS | head -n 1`` in a shell with pipefail: mmgate's own status is the result."""
    line = " ".join(shlex.quote(a) for a in mmgate_command(*args)) + " | head -n 1"
    return subprocess.run(
        ["bash", "-o", "pipefail", "-c", line],
        capture_output=True,
        text=True,
        env=subprocess_env(),
        timeout=180,  # a liveness bound: the shared CI machine can be very slow to start Python
    )


def test_help_lists_every_command() -> None:
    out = run("--help")
    assert out.returncode == 0
    for name in ("serve", "sim", "inspect", "tokens", "cost", "bench", "demo"):
        assert name in out.stdout


def test_version() -> None:
    """The version, and how the scheduler's hot modules run in that process (mmgate.compiled)."""
    out = run("--version")
    assert out.returncode == 0
    assert out.stdout.strip() == f"mmgate {__version__} (scheduler: {compiled.status()})"
    assert compiled.status().startswith(("compiled with mypyc", "pure Python ("))


def test_unknown_command_is_a_clear_error_with_a_hint() -> None:
    out = run("frobnicate")
    assert out.returncode == 2
    assert "unknown command" in out.stderr
    typo = run("inspct", "x.json")
    assert typo.returncode == 2 and "did you mean 'inspect'?" in typo.stderr


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["inspect", "missing.json"], "missing.json: No such file or directory"),
        (["inspect", "examples"], "examples: Is a directory"),
        (["tokens", "1280x720", "--family", "qwen3vl"], "did you mean 'qwen3-vl'?"),
        (["tokens", "1280x720", "--provider", "openai:gpt-40"], "did you mean 'gpt-4o'?"),
        (["tokens", "1280x720", "--model", "meta-llama/Llama-3.1-8B"], "no model family or hosted API"),
        (
            ["cost", "--prefix-tokens", "10", "--model", "claude-sonet-4-5"],
            "did you mean 'claude-sonnet-4-5'?",
        ),
        (["cost", "--prefix-tokens", "10", "--price-table", "missing.yaml"], "missing.yaml"),
        (
            ["sim", "--profile", "qwen3-vl-32b-h200", "--duration", "1"],
            "did you mean 'qwen3-vl-32b-h200-tp2'?",
        ),
        (["demo", "--profile", "fsat", "--port", "0"], "did you mean 'fast'?"),
        (["serve", "--config", "missing.yaml"], "missing.yaml"),
        (["serve", "--endpoints", "127.0.0.1:1", "--port", "99999"], "port must be in 0..65535"),
        (["demo", "--port", "99999"], "port must be in 0..65535"),
        (["bench", "plot", "missing-folder"], "missing-folder"),
    ],
)
def test_user_mistakes_are_one_line_and_exit_2(args: list[str], needle: str) -> None:
    out = run(*args)
    assert out.returncode == 2, out.stderr
    assert needle in out.stderr + out.stdout
    assert "Traceback" not in out.stderr


@pytest.mark.parametrize(
    "args",
    [
        # each prints far more than a pipe buffer (64 KiB) holds, so the reader leaves mid-write
        ["tokens", *(f"{w}x{w}" for w in range(100, 700)), "--family", "all", "--json"],
        ["tokens", *(f"{w}x{w}" for w in range(100, 700)), "--family", "all"],
        ["tokens", "--list", "--format", "tsv"],
        ["inspect", str(EXAMPLES / "images-url-and-repeat.json"), "--json"],
        ["cost", "--prefix-tokens", "12000", "--questions", "400", "--per-question"],
        ["--help"],
    ],
)
def test_a_reader_that_leaves_early_ends_the_command_quietly(args: list[str]) -> None:
    out = piped_into_head(*args)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip()  # head got its line
    assert out.stderr == ""  # no BrokenPipeError, no "Exception ignored" at interpreter exit


LONG_FIELD = "messages[0].content[1].image_url.url"


def test_inspect_prints_the_whole_table_when_piped() -> None:
    # rich assumes 80 columns without a terminal and used to cut this to "messages[0].cont…"
    out = run("inspect", str(EXAMPLES / "images-url-and-repeat.json"))
    assert out.returncode == 0
    assert LONG_FIELD in out.stdout and "…]" not in out.stdout
    assert "unique 3, unprobed 2" in out.stdout


@pytest.mark.parametrize(
    "args",
    [
        ["inspect", str(EXAMPLES / "images-url-and-repeat.json")],
        ["tokens", "1280x720", "640x480:5s", "--family", "qwen3-vl,gemma3", "--provider", "gemini"],
        ["tokens", "1280x720", "--family", "all"],
        ["tokens", "--list"],
        ["cost", "--prefix-tokens", "1000", "--questions", "3", "--per-question", "--model", "gpt-4o"],
    ],
)
def test_every_table_prints_as_tsv_md_and_json(args: list[str]) -> None:
    table = run(*args)
    tsv = run(*args, "--format", "tsv")
    md = run(*args, "--format", "md")
    js = run(*args, "--format", "json")
    assert {table.returncode, tsv.returncode, md.returncode, js.returncode} == {0}
    tsv_lines = [line for line in tsv.stdout.splitlines() if not line.startswith("# ")]  # titles
    header = tsv_lines[0].split("\t")
    assert len(header) >= 3 and all(header)
    first_row = tsv_lines[1].split("\t")
    assert len(first_row) == len(header)
    md_lines = md.stdout.splitlines()
    head = next(i for i, line in enumerate(md_lines) if line.startswith("| "))
    assert md_lines[head].count(" | ") == len(header) - 1
    assert set(md_lines[head + 1]) <= set("|-:")
    assert json.loads(js.stdout)
    assert table.stdout.count("┃") >= len(header)  # the terminal-style box table
    assert run(*args, "--json").stdout == js.stdout  # --json stays the short spelling


def test_tokens_model_resolves_a_hugging_face_id_like_the_gateway() -> None:
    by_model = run("tokens", "1920x1080", "--model", "Qwen/Qwen2.5-VL-7B-Instruct", "--json")
    by_family = run("tokens", "1920x1080", "--family", "qwen2.5-vl", "--json")
    assert by_model.returncode == 0, by_model.stderr
    assert json.loads(by_model.stdout) == json.loads(by_family.stdout)
    assert json.loads(by_model.stdout)[0]["family"] == "qwen2.5-vl"


@pytest.mark.parametrize(
    ("written", "rule"),
    [
        ("claude-sonnet-4-5", "anthropic"),
        ("anthropic/claude-opus-4-5-20251101", "anthropic"),
        ("gpt-4o", "openai:gpt-4o"),
        ("GPT-4o-2024-08-06", "openai:gpt-4o"),
        ("openai/o3-pro", "openai:o3"),
        ("gemini-2.5-pro", "gemini"),
    ],
)
def test_provider_rules_take_the_model_names_users_write(written: str, rule: str) -> None:
    out = run("tokens", "1280x720", "--provider", written, "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)[0]["provider"] == rule
    by_model = run("tokens", "1280x720", "--model", written, "--json")
    assert json.loads(by_model.stdout) == json.loads(out.stdout)


def test_sim_prints_its_fleet_as_json(tmp_path: Path) -> None:
    out = run("sim", "--profile", "fast", "--pods", "2", "--base-port", "0", "--duration", "0.5", "--json")
    assert out.returncode == 0, out.stderr
    pods = json.loads(out.stdout)
    assert [p["name"] for p in pods] == ["pod-0", "pod-1"]
    assert all(p["url"].startswith("http://127.0.0.1:") for p in pods)


def test_make_run_installs_the_runtime_dependencies_only(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    # a make of its own, not a sub-make of `make test` (that one would print "Leaving directory")
    env = {k: v for k, v in os.environ.items() if k not in ("MAKELEVEL", "MAKEFLAGS", "MFLAGS")}
    plan = subprocess.run(
        ["make", "-n", "run", f"VENV={venv}", "DEMO_ARGS=--port 8081"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert plan.returncode == 0, plan.stderr
    installs = [line for line in plan.stdout.splitlines() if "pip install" in line]
    assert installs and all("-e ." in line and "[dev]" not in line for line in installs)
    assert plan.stdout.splitlines()[-1].endswith("-m mmgate demo --port 8081")
    tests = subprocess.run(
        ["make", "-n", "test", f"VENV={venv}"], cwd=REPO, env=env, capture_output=True, text=True, timeout=60
    )
    assert "-e '.[dev]'" in tests.stdout  # dev tools are for make test


@pytest.mark.parametrize(
    ("absent", "args", "install"),
    [
        ("grpc,envoy", ["extproc", "--endpoints", "127.0.0.1:1"], "pip install 'mmgate[extproc]'"),
        ("torch,transformers", ["engine", "--tiny", "qwen2-vl"], "pip install 'mmgate[engine]'"),
        ("mmgate_bench", ["bench", "--help"], "pip install -e ./bench"),
        ("mmgate_bench", ["bench", "headline", "--out", "x"], "make bench"),
    ],
)
def test_a_subcommand_whose_extra_is_not_installed_says_what_to_install(
    absent: str, args: list[str], install: str
) -> None:
    """The benchmarks are their own distribution: without it ``mmgate bench`` names its install."""
    out = run_without(absent.split(","), *args)
    assert out.returncode == 2
    assert install in out.stderr and "Traceback" not in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1
