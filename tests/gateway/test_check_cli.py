"""``mmgate check`` as a user runs it: every mistake of a file at once, with file and line."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import yaml

from mmgate.config import parse_config
from mmgate.gateway.config_check import describe_flow
from support.configs import THREE_MISTAKES
from support.flow import flow_config
from support.processes import REPO, mmgate_command, subprocess_env

EXAMPLES = REPO / "examples"


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
    assert lines[0] == f"# {EXAMPLES / 'aggregated.yaml'} (llm-d.ai/v1alpha1)"
    assert lines[1] == "stage\tplugin\tparameters (non-default)"
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


def test_every_example_config_checks_clean_as_the_readme_invites() -> None:
    """``mmgate check examples/*.yaml`` as a shell expands it: every file there is a gateway config."""
    files = sorted(str(p.relative_to(REPO)) for p in EXAMPLES.glob("*.yaml"))
    assert len(files) >= 10
    out = subprocess.run(
        mmgate_command("check", *files), capture_output=True, text=True, env=subprocess_env(), cwd=REPO
    )
    assert out.returncode == 0, out.stderr
    assert out.stderr == ""


def test_a_price_table_is_named_for_what_it_is() -> None:
    out = check(str(EXAMPLES / "cost" / "prices.yaml"))
    assert out.returncode == 2
    lines = out.stderr.splitlines()
    assert "looks like a `mmgate cost` price table" in lines[0] and "unknown key" not in out.stderr
    assert lines[1:] == ["1 mistake in 1 of 1 file(s)"]


def test_a_file_with_no_config_key_is_one_mistake(tmp_path: Path) -> None:
    other = tmp_path / "other.yaml"
    other.write_text("name: web\nreplicas: 3\nimage: nginx\n")
    out = check(str(other))
    assert out.returncode == 2
    assert out.stderr.splitlines() == [
        f"{other}: not an EndpointPickerConfig: none of its top-level keys (name, replicas, image) is one "
        "of apiVersion, dataLayer, featureGates, flowControl, kind, parser, plugins, requestHandler, "
        "saturationDetector, schedulingProfiles or mmgate",
        "1 mistake in 1 of 1 file(s)",
    ]


def test_json_has_one_shape_for_one_or_several_files_good_or_bad(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(THREE_MISTAKES)
    good = str(EXAMPLES / "random.yaml")
    both = check(str(bad), good, "--json")
    assert both.returncode == 2
    data = json.loads(both.stdout)  # the errors are JSON too, on stdout
    assert list(data) == ["configs", "errors"]
    assert [c["file"] for c in data["configs"]] == [good]
    assert data["configs"][0]["scheduler"][-1] == {
        "stage": "default: picker",
        "plugin": "random-picker",
        "parameters (non-default)": "",
    }
    assert [(e["file"], e["line"], e["path"]) for e in data["errors"]] == [
        (str(bad), 6, "plugins[0].parameters.afinityThreshold"),
        (str(bad), 12, "schedulingProfiles[0].plugins[1].pluginRef"),
        (str(bad), 14, "mmgate.port"),
    ]
    assert data["errors"][2]["message"] == "port must be in 0..65535, got 99999"
    assert both.stderr == "3 mistakes in 1 of 2 file(s)\n"
    one = json.loads(check(good, "--format", "json").stdout)
    assert list(one) == ["configs", "errors"] and one["errors"] == [] and len(one["configs"]) == 1
    only_bad = json.loads(check(str(bad), "--json").stdout)
    assert one["configs"][0] == data["configs"][0] and only_bad["configs"] == []


def test_check_shows_the_flow_objectives_and_where_a_priority_comes_from() -> None:
    doc = yaml.safe_load(flow_config())
    doc["mmgate"]["kubernetes"] = {"namespace": "prod", "inferencePool": "vlm"}
    rows = {plugin: given for _, plugin, given in describe_flow(parse_config(doc, source="<t>"))}
    assert rows["objective critical"] == "priority=10" and rows["objective batch"] == "priority=-1"
    assert rows["objectives from Kubernetes"] == "InferenceObjectives of pool vlm in prod, over the file's"
    assert "API key's objective/priority" in rows["priority from"]
