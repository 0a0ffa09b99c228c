"""``mmgate demo``: what ``make run`` starts. Rewired as the layers land."""

from __future__ import annotations

import argparse

from mmgate import __version__


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--port", type=int, default=8080, help="gateway port (default 8080)")


def run(args: argparse.Namespace) -> int:
    print(f"mmgate {__version__}: the gateway is not assembled yet; see `mmgate --help`.")
    return 0
