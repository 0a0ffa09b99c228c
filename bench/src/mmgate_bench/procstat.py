"""What a process costs, read from ``/proc`` (Linux; no psutil): CPU time, resident memory, its tree.

Benchmarks charge a router for every process it runs (a router that forks workers pays for all of
them), so the readers take lists of pids and :func:`descendants` finds a process's tree. Fields come
from ``proc(5)``: ``/proc/PID/stat`` fields 14-17 are utime, stime, cutime and cstime in clock
ticks; ``/proc/PID/status`` has ``VmRSS`` (resident now) and ``VmHWM`` (peak resident) in kB. A
process that exited while being read counts as zero rather than failing the run.
"""

from __future__ import annotations

import contextlib
import os
import resource
from collections.abc import Sequence
from pathlib import Path

TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _stat_fields(pid: int) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name may hold spaces and parentheses: fields start after the last ')'.
    return raw[raw.rfind(")") + 2 :].split()


def _children_by_parent() -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        fields = _stat_fields(int(entry))
        if fields:
            children.setdefault(int(fields[1]), []).append(int(entry))
    return children


def children(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (a forking server's workers)."""
    return sorted(_children_by_parent().get(pid, ()))


def descendants(pid: int) -> list[int]:
    """``pid`` and every live process below it."""
    below = _children_by_parent()
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        todo.extend(below.get(current, ()))
    return found


def is_running(pid: int) -> bool:
    """True while ``pid`` exists and has not exited (a zombie waiting for its parent has exited)."""
    fields = _stat_fields(pid)
    return fields is not None and fields[0] != "Z"


def cpu_seconds(pids: Sequence[int]) -> float:
    """User + system CPU seconds used so far by these processes and their reaped children."""
    total = 0
    for pid in pids:
        fields = _stat_fields(pid)
        if fields:
            # utime, stime, cutime, cstime are fields 14-17 of stat; index 0 here is field 3.
            total += sum(int(v) for v in fields[11:15])
    return total / TICKS


def _status_kb(pids: Sequence[int], key: str) -> int:
    total = 0
    for pid in pids:
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith(key):
                    total += int(line.split()[1])
                    break
    return total


def rss_mb(pids: Sequence[int]) -> float:
    """Sum of these processes' resident sets now (VmRSS), in MiB."""
    return _status_kb(pids, "VmRSS:") / 1024


def peak_rss_mb(pids: Sequence[int]) -> float:
    """Sum of each process's peak resident set (VmHWM), in MiB."""
    return _status_kb(pids, "VmHWM:") / 1024


def own_cpu_seconds() -> tuple[float, float]:
    """This process's (user, system) CPU seconds, for a load client charging itself."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime, usage.ru_stime
