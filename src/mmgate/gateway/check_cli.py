"""``mmgate check FILE...``: check config files and show the scheduler each becomes.

Both halves of a check run: the file's shape (:mod:`mmgate.config`) and its meaning (building the
scheduler, endpoint addresses, the pricing family, the CA file:
:mod:`mmgate.gateway.config_check`). Every mistake of every file is printed, one per line as
``FILE:LINE: path: reason``, before the exit status 2, so a user fixes a file in one round
(``--format json``: one object, ``{"configs": [...], "errors": [{file, line, path, message}]}``,
for one file or several, good or bad). A good
file prints its producers in the order they run, the profile handler, each profile's filters,
weighted scorers and picker, and which plugins llm-d's default rules added.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from mmgate.config import ConfigError
from mmgate.gateway.config_check import check_file, describe, describe_flow
from mmgate.tables import Column, Table, add_format_argument, emit


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
    mistakes: list[ConfigError] = []
    tables: list[Table] = []
    configs: list[dict[str, Any]] = []
    as_json = args.format == "json"
    for path in args.files:
        config, scheduler, errors = check_file(path)
        if errors or config is None or scheduler is None:
            bad_files += 1
            mistakes += errors
            if not as_json:
                for error in errors:
                    print(error, file=sys.stderr)
            continue
        table = Table(COLUMNS, title=f"{path} ({config.picker.apiVersion})")
        for r in describe(scheduler, {p.instance_name for p in config.picker.plugins}):
            table.add(*r)
        for r in describe_flow(config):
            table.add(*r)
        tables.append(table)
        configs.append({"file": path, "apiVersion": config.picker.apiVersion, "scheduler": table.records()})
    if as_json:  # one shape for one file or several, good or bad
        emit(tables, "json", data={"configs": configs, "errors": [_error_record(e) for e in mistakes]})
    elif tables:
        emit(tables, args.format)
    if bad_files:
        noun = "mistake" if len(mistakes) == 1 else "mistakes"
        print(f"{len(mistakes)} {noun} in {bad_files} of {len(args.files)} file(s)", file=sys.stderr)
        return 2
    return 0


def _error_record(error: ConfigError) -> dict[str, Any]:
    return {"file": error.source, "line": error.line, "path": error.path or None, "message": error.reason}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="mmgate check")
    add_arguments(parser)
    return run(parser.parse_args(argv))
