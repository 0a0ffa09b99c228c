"""``--systems`` as a user types it: what it accepts is listed, every mistake is a message and exit 2."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from support.processes import mmgate_command, subprocess_env


def _bench(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        mmgate_command("bench", *args), capture_output=True, text=True, env=subprocess_env(), timeout=60
    )


def _unwrapped(text: str) -> str:
    """The text with line wrapping undone (argparse and rich break lines after a hyphen too)."""
    return re.sub(r"-\s+", "-", " ".join(text.split()))


def _refused(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    return _unwrapped(done.stderr)


def test_help_lists_every_accepted_system() -> None:
    done = _bench("run", "--help")
    assert done.returncode == 0
    text = _unwrapped(done.stdout)
    for name in (
        "round-robin",
        "aggregated",
        "encoder-affinity",
        "random",
        "sglang-router",
        "vllm-router",
        "smg",
    ):
        assert name in text
    assert "prices" not in text  # mmgate cost's price table is not a system


def test_a_file_of_another_command_is_refused_with_the_reason() -> None:
    prices = str(Path(__file__).resolve().parents[3] / "examples" / "cost" / "prices.yaml")
    err = _refused(_bench("run", "--des", "--systems", prices, "--rates", "1", "--duration", "1"))
    assert "prices.yaml" in err and "not a gateway config" in err and "not an EndpointPickerConfig" in err


@pytest.mark.parametrize("verb", ["run", "des"])
def test_a_missing_config_file_is_refused(verb: str, tmp_path: Path) -> None:
    err = _refused(_bench(verb, "--systems", str(tmp_path / "bad.yaml")))
    assert "bad.yaml does not exist" in err


def test_a_broken_config_file_is_refused_naming_the_problem(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("plugins: [\n")
    err = _refused(_bench("des", "--systems", f"round-robin,{bad}"))
    assert "bad.yaml" in err and "not valid YAML" in err
    typo = tmp_path / "typo.yaml"
    typo.write_text("plugin: []\n")
    assert "did you mean" in _refused(_bench("des", "--systems", str(typo)))  # the config's own hint


def test_an_unknown_system_gets_a_suggestion_and_the_list() -> None:
    err = _refused(_bench("des", "--systems", "round-robin,agregated"))
    assert "unknown system 'agregated'" in err and "did you mean 'aggregated'" in err
    assert "encoder-affinity" in err  # what it accepts


def test_an_unknown_benchmark_gets_a_suggestion() -> None:
    done = _bench("hotpth")
    assert done.returncode == 2 and "did you mean 'hotpath'" in done.stderr
    assert "Traceback" not in done.stderr
