"""``python -m mmgate.config FILE...``: check config files and show what the scheduler became.

Prints, per file, the producers in the order they run, each profile's filters, weighted scorers
and picker, and which plugins llm-d's default rules added. Exit status 1 on the first bad file,
with the error naming the offending key.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import msgspec

from mmgate.config import ConfigError, load_config
from mmgate.scheduling import Plugin, Scheduler, build_scheduler


def _params(p: Plugin[Any]) -> str:
    raw = msgspec.to_builtins(p.params)
    defaults = msgspec.to_builtins(type(p.params)())
    changed = {k: v for k, v in raw.items() if defaults.get(k) != v} if isinstance(raw, dict) else {}
    return ", ".join(f"{k}={_short(v)}" for k, v in changed.items())


def _short(value: object) -> str:
    """Numbers without noise; nested sections by their keys (the YAML has the details)."""
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, dict):
        return "{" + ", ".join(value) + "}"
    return str(value)


def describe(scheduler: Scheduler, configured: set[str]) -> list[tuple[str, str, str]]:
    """Rows of (stage, plugin, non-default parameters); injected defaults are marked."""

    def row(where: str, p: Plugin[Any], extra: str = "") -> tuple[str, str, str]:
        name = p.name if p.name == p.type_name else f"{p.name} ({p.type_name})"
        if p.name not in configured:
            name += " (injected default)"
        return (where, name, ", ".join(x for x in (extra, _params(p)) if x))

    rows = [row(f"producer {i + 1}", p) for i, p in enumerate(scheduler.producers)]
    rows.append(row("profile handler", scheduler.handler))
    for profile in scheduler.profiles.values():
        rows += [row(f"{profile.name}: filter", f) for f in profile.filters]
        rows += [row(f"{profile.name}: scorer", ws.scorer, f"weight={ws.weight:g}") for ws in profile.scorers]
        rows.append(row(f"{profile.name}: picker", profile.picker))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m mmgate.config",
        description="Validate mmgate / llm-d EndpointPickerConfig files and show the resolved scheduler.",
    )
    parser.add_argument("files", nargs="+", help="YAML config files")
    args = parser.parse_args(argv)

    from rich.console import Console
    from rich.table import Table

    console = Console()
    for path in args.files:
        try:
            cfg = load_config(path)
            scheduler = build_scheduler(cfg.picker, mmgate=cfg.mmgate)
        except ConfigError as exc:
            print(f"{path}: {exc}", file=sys.stderr)
            return 1
        table = Table(title=f"{path} ({cfg.picker.apiVersion})")
        for col in ("stage", "plugin", "parameters (non-default)"):
            table.add_column(col)
        for r in describe(scheduler, {p.instance_name for p in cfg.picker.plugins}):
            table.add_row(*r)
        console.print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
