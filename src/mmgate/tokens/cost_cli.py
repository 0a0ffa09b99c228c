"""``mmgate cost``: what n questions about one shared prefix cost, with and without prompt caching."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from mmgate.tables import Table, add_format_argument, columns, emit
from mmgate.tokens.cost import (
    TTLS,
    ModelPrice,
    PriceTable,
    Workload,
    break_even,
    cost_with_cache,
    cost_without_cache,
    load_price_table,
)

EXAMPLE_TABLE = Path(__file__).resolve().parents[3] / "examples" / "cost" / "prices.yaml"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.description = (
        "Cost of N questions that share a prefix (system prompt, document, images), with and without\n"
        "prompt caching, and the number of questions from which caching pays.\n\n"
        "With caching the first question writes the prefix (cache_write x input price) and every\n"
        "later one reads it (cache_read x input price), assuming they arrive within the cache TTL.\n\n"
        "example:\n"
        "  mmgate cost --prefix-tokens 12000 --question-tokens 40 --output-tokens 300 --questions 10 \\\n"
        "      --price-table examples/cost/prices.yaml\n"
        "  mmgate cost --document report.pdf --question-tokens 40 --output-tokens 300"
    )
    parser.add_argument(
        "--prefix-tokens", type=int, default=0, metavar="T", help="tokens of the shared prefix"
    )
    parser.add_argument(
        "--document",
        action="append",
        default=[],
        metavar="FILE.pdf",
        help="a PDF in the shared prefix (repeatable): its pages and text layer priced by Claude's "
        "document rule, added to --prefix-tokens",
    )
    parser.add_argument(
        "--question-tokens", type=int, default=0, metavar="Q", help="new input tokens per question"
    )
    parser.add_argument(
        "--output-tokens", type=int, default=0, metavar="O", help="output tokens per question"
    )
    parser.add_argument(
        "--questions", type=int, default=10, metavar="N", help="number of questions (default 10)"
    )
    parser.add_argument(
        "--price-table",
        metavar="FILE",
        default=None,
        help="YAML price table (USD per million tokens); default: the shipped examples/cost/prices.yaml",
    )
    parser.add_argument(
        "--model", action="append", default=[], help="only these models of the table (repeatable)"
    )
    parser.add_argument(
        "--per-question",
        action="store_true",
        help="also print cumulative cost after each question for each model",
    )
    add_format_argument(parser)


def summarize(model: ModelPrice, w: Workload) -> dict[str, Any]:
    without = cost_without_cache(model, w)
    row: dict[str, Any] = {"model": model.name, "questions": w.questions, "without_cache": round(without, 6)}
    for ttl in TTLS:
        with_cache = cost_with_cache(model, w, ttl)
        row[f"with_cache_{ttl}"] = round(with_cache, 6)
        row[f"saving_{ttl}"] = round(1 - with_cache / without, 4) if without else 0.0
        row[f"break_even_{ttl}"] = break_even(model, ttl)
    return row


def run(args: argparse.Namespace) -> int:
    try:
        if args.price_table is None and not EXAMPLE_TABLE.is_file():
            raise ValueError("give a price table with --price-table FILE (see examples/cost/prices.yaml)")
        path = args.price_table or EXAMPLE_TABLE
        table: PriceTable = load_price_table(path)
        models = [table.get(m) for m in args.model] if args.model else list(table.models.values())
        if not args.prefix_tokens and not args.document:
            raise ValueError("give the shared prefix: --prefix-tokens T and/or --document FILE.pdf")
        prefix = args.prefix_tokens + sum(document_tokens(Path(d)) for d in args.document)
        w = Workload(prefix, args.question_tokens, args.output_tokens, args.questions)
    except ValueError as exc:
        print(f"mmgate cost: error: {exc}", file=sys.stderr)
        return 2
    rows = [summarize(m, w) for m in models]
    data: dict[str, Any] = {"workload": _workload(w), "models": rows}
    if args.per_question:
        data["per_question"] = {m.name: _cumulative(m, w) for m in models}
    source = args.price_table or "examples/cost/prices.yaml"
    if table.read:
        source += f", read {table.read}"
    tables = _tables(rows, w, models, args.per_question, source)
    notes = ["break-even: the fewest questions (within the cache TTL) for which caching costs no more."]
    emit(tables, args.format, data=data, notes=notes)
    return 0


def document_tokens(path: Path) -> int:
    """A PDF's tokens on Claude (page images + text layer; docs/tokens.md "Documents")."""
    from mmgate.tokens.cli import parse_input
    from mmgate.tokens.providers import anthropic_document

    if not path.is_file():  # else parse_input would try it as a size ("neither a file nor a size")
        raise ValueError(f"--document {path}: no such file")
    item = parse_input(str(path))
    if item.pages is None:
        raise ValueError(f"{path}: --document takes a PDF")
    return anthropic_document(item.pages, item.text_tokens).total


def _workload(w: Workload) -> dict[str, int]:
    return {
        "prefix_tokens": w.prefix_tokens,
        "question_tokens": w.question_tokens,
        "output_tokens": w.output_tokens,
        "questions": w.questions,
    }


def _cumulative(m: ModelPrice, w: Workload) -> list[dict[str, float]]:
    return [
        {
            "n": n,
            "without_cache": round(cost_without_cache(m, w, n), 6),
            "with_cache_5m": round(cost_with_cache(m, w, "5m", n), 6),
            "with_cache_1h": round(cost_with_cache(m, w, "1h", n), 6),
        }
        for n in range(1, w.questions + 1)
    ]


def _usd(x: float) -> str:
    return f"${x:,.4f}" if x < 10 else f"${x:,.2f}"


def _tables(
    rows: list[dict[str, Any]], w: Workload, models: list[ModelPrice], per_q: bool, source: str
) -> list[Table]:
    title = (
        f"{w.questions} questions on a {w.prefix_tokens:,}-token prefix "
        f"(+{w.question_tokens:,} in / {w.output_tokens:,} out each) — prices from {source}"
    )
    heads = ("no cache", "cache 5m", "saving 5m", "break-even 5m", "cache 1h", "saving 1h", "break-even 1h")
    summary = Table(columns("model", *heads, numeric=heads), title=title)
    for r in rows:
        summary.add(
            r["model"],
            _usd(r["without_cache"]),
            _usd(r["with_cache_5m"]),
            f"{r['saving_5m']:.0%}",
            _n(r["break_even_5m"]),
            _usd(r["with_cache_1h"]),
            f"{r['saving_1h']:.0%}",
            _n(r["break_even_1h"]),
        )
    tables = [summary]
    if per_q:
        cumulative = ("questions", "no cache", "cache 5m", "cache 1h")
        for m in models:
            t = Table(columns(*cumulative, numeric=cumulative), title=f"{m.name}: cumulative cost")
            for c in _cumulative(m, w):
                t.add(c["n"], _usd(c["without_cache"]), _usd(c["with_cache_5m"]), _usd(c["with_cache_1h"]))
            tables.append(t)
    return tables


def _n(value: int | None) -> str:
    return "never" if value is None else f"n ≥ {value}"
