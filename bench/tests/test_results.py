"""What benchmarks write: JSON files alike, markdown tables alike."""

from __future__ import annotations

import json
from pathlib import Path

from mmgate_bench.results import markdown_table, write_json


def test_json_lands_in_a_new_folder_and_reads_back(tmp_path: Path) -> None:
    out = write_json(tmp_path / "a" / "b" / "run.json", {"rows": [{"rps": 1.5}], "by_minute": {0: 0.1}})
    assert out == tmp_path / "a" / "b" / "run.json"
    text = out.read_text()
    assert text.endswith("}\n")
    assert json.loads(text) == {"rows": [{"rps": 1.5}], "by_minute": {"0": 0.1}}  # JSON keys are strings


def test_a_markdown_table_has_a_rule_under_its_header() -> None:
    lines = markdown_table(["system", "rps"], [["direct", "423"], ["mmgate", "401"]])
    assert lines == ["| system | rps |", "|---|---|", "| direct | 423 |", "| mmgate | 401 |"]
    assert markdown_table(["a"], []) == ["| a |", "|---|"]
