"""docs/quickstart.md as written, from a fresh checkout: every step runs (``capture_quickstart.py
--check`` against a real demo, Envoy included), and the steps that need no server print exactly
what the page shows."""

from __future__ import annotations

import re
import socket
import subprocess
import sys

import pytest

from support.processes import REPO, subprocess_env

PAGE = REPO / "docs" / "quickstart.md"
SCRIPT = REPO / "bench" / "scripts" / "capture_quickstart.py"
# Commands whose output depends on nothing running (no demo, no clock, no compiled build).
OFFLINE = re.compile(r"^mmgate (check|tokens|cost|inspect|--help|bench --help)\b")


def steps() -> list[tuple[str, str]]:
    """(command, what the page shows under it) for every ``$`` line of a plain block."""
    found: list[tuple[str, list[str]]] = []
    fence: str | None = None  # the opening line of the block we are in
    for line in PAGE.read_text().splitlines():
        if line.startswith("```"):
            fence = line if fence is None else None
            continue
        if fence != "```":  # outside blocks, or in one with a language (shown, not run)
            continue
        if line.startswith("$ "):
            found.append((line[2:], []))
        elif found:
            found[-1][1].append(line)
    return [(command, "\n".join(shown)) for command, shown in found]


def test_every_file_a_step_reads_ships_with_the_repository() -> None:
    for command, _ in steps():
        for path in re.findall(r"(?<![\w/])(examples/[\w./-]+)", command):
            assert (REPO / path).exists() or "*" in path, f"{command}: {path} is not in the repository"


@pytest.mark.parametrize("command", [c for c, _ in steps() if OFFLINE.match(c) and "/tmp/" not in c])
def test_offline_steps_print_what_the_page_shows(command: str) -> None:
    shown = dict(steps())[command]
    done = subprocess.run(
        ["bash", "-c", command.replace("mmgate ", f"{sys.executable} -m mmgate ", 1)],
        cwd=REPO,
        capture_output=True,
        text=True,
        env=subprocess_env(COLUMNS="200"),
        timeout=120,
    )
    expected = shown.splitlines()
    status = 0
    if expected and (m := re.fullmatch(r"\(exit status (\d+)\)", expected[-1])):
        status, expected = int(m.group(1)), expected[:-1]
    assert done.returncode == status, done.stderr
    printed = (done.stdout + done.stderr).rstrip().splitlines()
    assert [line.rstrip() for line in printed] == [line.rstrip() for line in expected]


PAGE_PORTS = (8080, 28080, 28081, 28082, 28085, 28101, 28111, 28121, 28201, 28202, 28203, 29002, 29090, 29191)


@pytest.mark.slow
def test_every_step_of_the_page_runs_as_written() -> None:
    """The capture script in check mode: a real demo on the page's port and every command in
    order; a step whose exit status or HTTP status is not the page's fails it."""
    for port in PAGE_PORTS:
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                pytest.skip(f"port {port}, which the page uses, is taken on this machine")
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--check"],
        capture_output=True,
        text=True,
        env=subprocess_env(),
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
