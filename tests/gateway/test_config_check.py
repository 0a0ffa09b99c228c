"""A config's meaning, checked where the app is assembled: references outside the file, and the
``mmgate check`` command over both halves."""

from __future__ import annotations

from pathlib import Path

import pytest

from mmgate.config import ConfigErrors, load_config_text
from mmgate.gateway.check_cli import main
from mmgate.gateway.config_check import load_checked

EXAMPLES = sorted((Path(__file__).parents[2] / "examples").glob("*.yaml"))


def test_values_naming_something_outside_the_file_are_checked_with_the_file(tmp_path: Path) -> None:
    text = f"""mmgate:
  pricing: {{family: qwen9}}
  endpoints: ["ftp://pod:1", {{url: "pod:1/v1"}}, "pod-b:8000"]
  upstreamTLS: {{caFile: {tmp_path / "no-ca.pem"}}}
"""
    path = tmp_path / "refs.yaml"
    path.write_text(text)
    load_config_text(text)  # the shape is right: what it names is checked where the app is built
    with pytest.raises(ConfigErrors) as err:
        load_checked(str(path))
    assert [(e.line, e.path) for e in err.value.errors] == [
        (2, "mmgate.pricing.family"),
        (3, "mmgate.endpoints[0]"),
        (3, "mmgate.endpoints[1].url"),
        (4, "mmgate.upstreamTLS.caFile"),
    ]
    assert "scheme must be http or https" in str(err.value)
    assert "unknown family 'qwen9'" in str(err.value)


def test_config_check_command(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    assert main([str(EXAMPLES[0].parent / "aggregated.yaml")]) == 0
    out = capsys.readouterr().out
    assert "max-score-picker (injected default)" in out
    assert "affinityThreshold=0.6" in out
    bad = tmp_path / "bad.yaml"
    bad.write_text("plugins:\n- type: approx-prefix-cache-producer\n  parameters: {blockSizeToken: 64}\n")
    assert main([str(bad)]) == 2
    assert f"{bad}:3: plugins[0].parameters.blockSizeToken" in capsys.readouterr().err
