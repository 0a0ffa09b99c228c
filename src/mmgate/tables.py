"""Tables as every subcommand prints them: ``--format table|json|tsv|md``, in full when piped.

A subcommand builds :class:`Table` values (plain-text cells) and hands them to :func:`emit` with
the format the user chose. On a terminal ``table`` draws a rich box table that folds to the
window's width; anywhere else (a pipe, a file) it is drawn as wide as its longest cells, because
rich would otherwise assume 80 columns and cut ``messages[1].content[0]...`` to ``messages[1].cont…``
for whoever greps the output. ``tsv`` and ``md`` carry the same cells for scripts and for pasting
into documents (a table's title is a ``# title`` line in tsv, bold in md); ``json`` prints the
subcommand's own structured data (numbers stay numbers) or, without it, one object per row keyed
by column name.

The text is rendered to a string and written with one ``sys.stdout.write``, so a reader that
goes away (``mmgate ... | head``) surfaces as a single ``BrokenPipeError`` that ``mmgate.cli``
handles for every subcommand.
"""

from __future__ import annotations

import argparse
import io
import json
import shutil
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

FORMATS = ("table", "json", "tsv", "md")


@dataclass(frozen=True, slots=True)
class Column:
    """A column: its heading, whether it holds numbers (right-aligned), an optional rich style
    used only on terminals, and for prose cells a width to wrap at (words wrap onto more lines;
    nothing is cut). Identifiers and JSON paths never set ``wrap``: they must stay greppable."""

    name: str
    numeric: bool = False
    style: str | None = None
    wrap: int | None = None


@dataclass(slots=True)
class Table:
    """A titled grid of plain-text cells (no rich markup: the same cells go to every format)."""

    columns: tuple[Column, ...]
    title: str = ""
    rows: list[tuple[str, ...]] = field(default_factory=list)

    def add(self, *cells: object) -> None:
        if len(cells) != len(self.columns):
            raise ValueError(f"row has {len(cells)} cells for {len(self.columns)} columns")
        self.rows.append(tuple("" if c is None else str(c) for c in cells))

    def records(self) -> list[dict[str, str]]:
        """One dict per row keyed by column name (the default ``--format json``)."""
        names = [c.name for c in self.columns]
        return [dict(zip(names, row, strict=True)) for row in self.rows]


def columns(*names: str, numeric: Sequence[str] = ()) -> tuple[Column, ...]:
    """Shorthand for columns without styles: ``columns("model", "tokens", numeric=["tokens"])``."""
    return tuple(Column(n, numeric=n in numeric) for n in names)


def add_format_argument(parser: argparse.ArgumentParser) -> None:
    """``--format table|json|tsv|md`` and ``--json`` (kept as the short spelling of ``--format json``)."""
    group = parser.add_mutually_exclusive_group()
    group.add_argument(
        "--format",
        choices=FORMATS,
        default="table",
        help="table (default; drawn in full when not on a terminal), json, tsv (tab-separated, "
        "header first) or md (Markdown)",
    )
    group.add_argument(
        "--json", dest="format", action="store_const", const="json", help="same as --format json"
    )


def emit(tables: Sequence[Table], fmt: str, *, data: Any = None, notes: Sequence[str] = ()) -> None:
    """Write ``tables`` to stdout in ``fmt``. ``data`` is what ``json`` prints (default: the rows);
    ``notes`` are lines of explanation printed after a ``table`` or ``md`` (not in tsv or json)."""
    sys.stdout.write(render(tables, fmt, data=data, notes=notes, terminal=sys.stdout.isatty()))
    sys.stdout.flush()


def render(
    tables: Sequence[Table],
    fmt: str,
    *,
    data: Any = None,
    notes: Sequence[str] = (),
    terminal: bool = False,
) -> str:
    """The text :func:`emit` writes (a pure function, so tests can check every format)."""
    if fmt == "json":
        if data is None:
            data = tables[0].records() if len(tables) == 1 else [_titled(t) for t in tables]
        return json.dumps(data, indent=2, ensure_ascii=False) + "\n"
    if fmt == "tsv":
        return "\n".join(_tsv(t) for t in tables)
    if fmt == "md":
        parts = [_markdown(t) for t in tables]
        if notes:
            parts.append("\n".join(notes) + "\n")
        return "\n".join(parts)
    if fmt == "table":
        return _rich(tables, notes, terminal)
    raise ValueError(f"unknown format {fmt!r}; valid: {', '.join(FORMATS)}")


def _titled(table: Table) -> dict[str, Any]:
    return {"title": table.title, "rows": table.records()}


def _tsv_cell(text: str) -> str:
    return text.replace("\t", " ").replace("\r", " ").replace("\n", " ")


def _tsv(table: Table) -> str:
    # The title as a comment line (``#``, which ``pandas.read_csv(comment="#")``, awk and
    # ``grep -v '^#'`` skip), so several tables stay told apart.
    lines = [f"# {_tsv_cell(table.title)}"] if table.title else []
    lines.append("\t".join(_tsv_cell(c.name) for c in table.columns))
    lines += ["\t".join(_tsv_cell(cell) for cell in row) for row in table.rows]
    return "\n".join(lines) + "\n"


def _md_cell(text: str) -> str:
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", "<br>") or " "


def _markdown(table: Table) -> str:
    lines = [f"**{_md_cell(table.title)}**", ""] if table.title else []
    lines.append("| " + " | ".join(_md_cell(c.name) for c in table.columns) + " |")
    lines.append("|" + "|".join("---:" if c.numeric else "---" for c in table.columns) + "|")
    lines += ["| " + " | ".join(_md_cell(cell) for cell in row) + " |" for row in table.rows]
    return "\n".join(lines) + "\n"


def _rich(tables: Sequence[Table], notes: Sequence[str], terminal: bool) -> str:
    from rich.console import Console
    from rich.measure import Measurement
    from rich.table import Table as RichTable
    from rich.text import Text

    drawn = []
    for t in tables:
        out = RichTable()
        for c in t.columns:
            out.add_column(
                c.name,
                justify="right" if c.numeric else "left",
                style=c.style,
                overflow="fold",
                max_width=c.wrap,
            )
        for row in t.rows:
            out.add_row(*(Text(cell) for cell in row))
        drawn.append((t.title, out))
    buffer = io.StringIO()
    if terminal:
        console = Console(file=buffer, force_terminal=True, width=shutil.get_terminal_size().columns)
    else:
        # As wide as the widest table needs: nothing folded, nothing cut, no colour codes.
        probe = Console(file=io.StringIO(), width=100_000)
        widths = [Measurement.get(probe, probe.options, d).maximum for _, d in drawn]
        width = max([80, *widths, *(len(n) for n in notes)])
        console = Console(file=buffer, width=width, force_terminal=False, no_color=True)
    for title, d in drawn:
        if title:  # a line of its own: rich would wrap a title to the table's width
            console.print(Text(title), style="italic", soft_wrap=True)
        console.print(d)
    for note in notes:
        console.print(Text(note), style="dim", soft_wrap=True)
    if terminal:
        return buffer.getvalue()
    return "".join(line.rstrip() + "\n" for line in buffer.getvalue().splitlines())
