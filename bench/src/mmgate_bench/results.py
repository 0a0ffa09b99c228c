"""What a benchmark writes: its raw numbers as JSON and its tables as markdown.

Every benchmark keeps its raw figures as JSON next to what it prints, so a page under
docs/benchmarks/ can quote a run and a later report can be re-rendered from it. One writer keeps
the files alike: the folder is created, the JSON is indented by one space (diff-friendly, and the
large per-request files stay compact) and ends with a newline. Tables that pages quote are GitHub
markdown, built by one function so every report's tables look the same.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path


def write_json(path: Path | str, data: object) -> Path:
    """Write ``data`` (dicts, lists, numbers, strings; int keys become strings) to ``path``."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(data, indent=1) + "\n")
    return out


def markdown_table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    """The lines of a markdown table: the header, the rule, one line per row of formatted cells."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines
