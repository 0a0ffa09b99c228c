"""``mmgate check`` as a user runs it: every mistake of a file at once, with file and line."""

from __future__ import annotations

import subprocess
from pathlib import Path

from support.processes import REPO, mmgate_command, subprocess_env

EXAMPLES = REPO / "examples"

THREE_MISTAKES = """\
apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: prefix-cache-affinity-filter
  parameters:
    afinityThreshold: 0.6
- type: token-load-scorer
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: prefix-cache-affinity-filter
  - pluginRef: token-load-scorr
mmgate:
  port: 99999
"""


def check(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        mmgate_command("check", *args), capture_output=True, text=True, env=subprocess_env(COLUMNS="200")
    )


def test_a_file_with_three_mistakes_prints_three(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(THREE_MISTAKES)
    out = check(str(bad))
    assert out.returncode == 2
    lines = out.stderr.splitlines()
    assert lines[0].startswith(f"{bad}:6: plugins[0].parameters.afinityThreshold: unknown key")
    assert "did you mean 'affinityThreshold'" in lines[0]
    assert lines[1].startswith(
        f"{bad}:12: schedulingProfiles[0].plugins[1].pluginRef: pluginRef 'token-load-scorr'"
    )
    assert lines[2] == f"{bad}:14: mmgate.port: port must be in 0..65535, got 99999"
    assert lines[3:] == ["3 mistakes in 1 of 1 file(s)"]
    assert "Traceback" not in out.stderr and out.stdout == ""


def test_a_good_file_prints_the_scheduler_it_becomes(tmp_path: Path) -> None:
    missing = tmp_path / "missing.yaml"
    out = check(str(EXAMPLES / "aggregated.yaml"), str(missing))
    assert out.returncode == 2  # one of the two is missing
    assert (
        "prefix-cache-affinity-filter" in out.stdout and "max-score-picker (injected default)" in out.stdout
    )
    assert out.stderr.splitlines() == [
        f"{missing}: cannot read config file: No such file or directory",
        "1 mistake in 1 of 2 file(s)",
    ]
    out = check(str(EXAMPLES / "aggregated.yaml"))
    assert out.returncode == 0 and out.stderr == ""
    assert "aggregated.yaml (llm-d.ai/v1alpha1)" in out.stdout
    out = check(str(EXAMPLES / "aggregated.yaml"), "--format", "tsv")
    lines = out.stdout.splitlines()
    assert lines[0] == "stage\tplugin\tparameters (non-default)"
    assert "default: picker\tmax-score-picker (injected default)\t" in lines


def test_engine_tokens_without_a_tokenizer_folder_exit_2(tmp_path: Path) -> None:
    config = tmp_path / "engine.yaml"
    config.write_text(
        "plugins:\n- type: token-producer\n  parameters:\n    tokens:\n"
        f"    - {{model: '*', mode: engine, tokenizerDir: {tmp_path}}}\n"
    )
    out = check(str(config))
    assert out.returncode == 2
    assert "no tokenizer.json" in out.stdout + out.stderr
    assert "Traceback" not in out.stderr
