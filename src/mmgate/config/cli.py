"""``mmgate check FILE...``: check config files and show the scheduler each becomes.

Both halves of a check run: the file's shape (this package) and its meaning (building the
scheduler, :mod:`mmgate.scheduling.build`), and every mistake of every file is printed, one per
line as ``FILE:LINE: path: reason``, before the exit status 2, so a user fixes a file in one
round. A good file prints its producers in the order they run, the profile handler, each
profile's filters, weighted scorers and picker, and which plugins llm-d's default rules added.
``python -m mmgate.config FILE...`` is the same command.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import msgspec

from mmgate.config import ConfigError, GatewayConfig, in_file_order, read_config
from mmgate.scheduling import Plugin, Scheduler, build_scheduler
from mmgate.tables import Column, Table, add_format_argument, emit


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


def describe_flow(config: GatewayConfig) -> list[tuple[str, str, str]]:
    """Rows for flow control when its feature gate is on: the detector, then each band given."""
    from mmgate.config.flow import FEATURE_GATE, FLOW_PLUGIN_TYPES

    if FEATURE_GATE not in config.picker.featureGates:
        return []
    rows = [("flow control", p.instance_name, _params_of(p.parameters)) for p in config.picker.plugins
            if p.type in FLOW_PLUGIN_TYPES]  # fmt: skip
    fc = config.picker.flowControl
    if fc is not None:
        for band in fc.priorityBands:
            given = {
                k: v for k, v in msgspec.structs.asdict(band).items() if v is not None and k != "priority"
            }
            rows.append(("flow control", f"priority {band.priority}", _params_of(given)))
    return rows or [("flow control", "on", "llm-d's defaults")]


def _params_of(params: Any) -> str:
    if not params:
        return ""
    return ", ".join(f"{k}={_short(v)}" for k, v in dict(params).items())


def check_file(path: str) -> tuple[GatewayConfig | None, Scheduler | None, list[ConfigError]]:
    """Every mistake of one file, located; the config and scheduler when there is none.

    The meaning is checked even when the ``mmgate:`` section has mistakes (with that section's
    defaults), so both kinds show up in one run; it is not when the picker part did not decode.
    """
    config, errors = read_config(path)
    if config is None:
        return None, None, errors
    scheduler: Scheduler | None = None
    try:
        scheduler = build_scheduler(config.picker, mmgate=config.mmgate)
    except ConfigError as exc:
        errors += config.locate(exc).errors
    from mmgate.control.flow import flow_settings_of  # the flow-control sections' meaning

    try:
        flow_settings_of(config.picker, config.mmgate)
    except ConfigError as exc:
        errors += config.locate(exc).errors
    if errors:
        return config, None, in_file_order(errors)
    return config, scheduler, []


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Check mmgate / llm-d EndpointPickerConfig files: every mistake with its file and line "
        "(exit 2), or the scheduler each file becomes."
    )
    parser.add_argument("files", nargs="+", metavar="FILE", help="YAML config files")
    add_format_argument(parser)


COLUMNS = (Column("stage"), Column("plugin"), Column("parameters (non-default)", wrap=48))


def run(args: argparse.Namespace) -> int:
    bad_files = 0
    mistakes = 0
    tables: list[Table] = []
    for path in args.files:
        config, scheduler, errors = check_file(path)
        if errors or config is None or scheduler is None:
            bad_files += 1
            mistakes += len(errors)
            for error in errors:
                print(error, file=sys.stderr)
            continue
        table = Table(COLUMNS, title=f"{path} ({config.picker.apiVersion})")
        for r in describe(scheduler, {p.instance_name for p in config.picker.plugins}):
            table.add(*r)
        for r in describe_flow(config):
            table.add(*r)
        tables.append(table)
    if tables:
        emit(tables, args.format)
    if bad_files:
        noun = "mistake" if mistakes == 1 else "mistakes"
        print(f"{mistakes} {noun} in {bad_files} of {len(args.files)} file(s)", file=sys.stderr)
        return 2
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="mmgate check")
    add_arguments(parser)
    return run(parser.parse_args(argv))
