"""Argument types the subcommands share (each subcommand owns its own flags, :mod:`mmgate.cli`)."""

from __future__ import annotations

import argparse


def port(text: str) -> int:
    """An argparse ``type`` for a TCP port flag: 0..65535 (0 picks a free one). Without it the
    socket layer would wrap 99999 to 34463 and listen there."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"port must be in 0..65535, got {value}")
    return value


def positive(text: str) -> float:
    """An argparse ``type`` for a number that must be above zero (a time scale, a rate): the
    mistake is a usage line and exit 2 before anything starts, not an error from deep inside."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value > 0:  # also refuses nan
        raise argparse.ArgumentTypeError(f"must be greater than 0, got {text}")
    return value


def seconds(text: str) -> float:
    """An argparse ``type`` for a duration that may be zero (a drain, a grace period): a finite
    number of seconds, 0 or more."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not 0 <= value < float("inf"):  # also refuses nan
        raise argparse.ArgumentTypeError(f"must be 0 or more seconds, got {text}")
    return value
