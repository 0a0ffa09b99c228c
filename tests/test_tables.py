"""``mmgate.tables``: one table, four formats, nothing cut when the output is not a terminal."""

from __future__ import annotations

import json

import pytest

from mmgate.tables import Column, Table, columns, render

LONG = "messages[12].content[3].image_url.url"


def sample() -> Table:
    t = Table((Column("#", numeric=True), Column("field"), Column("note", wrap=12)), title="parts")
    t.add(0, LONG, "a | pipe")
    t.add(1, "tab\there", "line\nbreak and more words than twelve")
    return t


def test_a_table_not_on_a_terminal_is_drawn_as_wide_as_its_cells() -> None:
    wide = Table(columns("field", "x"), title="t")
    wide.add(LONG * 4, "y")  # 148 characters: rich alone would fold or cut it at 80 columns
    text = render([wide], "table", terminal=False)
    assert LONG * 4 in text and "…" not in text
    assert all(line == line.rstrip() for line in text.splitlines())
    assert "\x1b[" not in text  # no colour codes in a pipe


def test_wrap_columns_fold_words_without_losing_any() -> None:
    text = render([sample()], "table", terminal=False)
    words = " ".join(text.replace("│", " ").split())
    for word in ("line", "break", "and", "more", "words", "than", "twelve"):
        assert word in words
    assert LONG in text


def test_tsv_is_one_line_per_row_with_tabs_only_between_cells() -> None:
    lines = render([sample()], "tsv").splitlines()
    assert lines[0] == "# parts"  # the title, as a comment line
    assert lines[1] == "#\tfield\tnote"
    assert [len(line.split("\t")) for line in lines[1:]] == [3, 3, 3]
    assert lines[3].split("\t")[1] == "tab here"


def test_tsv_keeps_each_tables_title() -> None:
    untitled = Table(sample().columns)
    untitled.add(1, "x", "y")
    lines = render([sample(), untitled, sample()], "tsv").splitlines()
    assert [line for line in lines if line.startswith("# ")] == ["# parts", "# parts"]
    assert lines.count("") == 2  # a blank line between tables


def test_markdown_escapes_pipes_and_aligns_numbers_right() -> None:
    text = render([sample()], "md")
    assert "**parts**" in text
    assert "|---:|---|---|" in text
    assert "a \\| pipe" in text and "line<br>break" in text


def test_json_is_the_callers_data_or_the_rows() -> None:
    assert json.loads(render([sample()], "json", data={"n": 1})) == {"n": 1}
    rows = json.loads(render([sample()], "json"))
    assert rows[0] == {"#": "0", "field": LONG, "note": "a | pipe"}
    two = json.loads(render([sample(), sample()], "json"))
    assert [t["title"] for t in two] == ["parts", "parts"]


def test_rows_must_fit_the_columns_and_formats_are_checked() -> None:
    with pytest.raises(ValueError, match="2 cells for 3 columns"):
        sample().add(1, 2)
    with pytest.raises(ValueError, match="unknown format 'csv'"):
        render([sample()], "csv")
