"""Process costs read from /proc, checked against a real child process."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from mmgate_bench.procstat import (
    children,
    cpu_seconds,
    descendants,
    is_running,
    own_cpu_seconds,
    peak_rss_mb,
    rss_mb,
)

# A child that allocates ~64 MiB, touches it, forks a grandchild that sleeps, then spins on the CPU.
CHILD = """
import os, sys, time
block = bytearray(64 * 1024 * 1024)
for i in range(0, len(block), 4096):
    block[i] = 1
if os.fork() == 0:
    time.sleep(60)
    os._exit(0)
print("ready", flush=True)
end = time.process_time() + 0.3
while time.process_time() < end:
    pass
print("spun", flush=True)
sys.stdin.read()
"""


def test_a_child_tree_is_found_and_charged() -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None and child.stdout.readline() == "ready\n"
        tree = descendants(child.pid)
        assert tree[0] == child.pid and len(tree) == 2  # the child and its grandchild
        assert children(child.pid) == tree[1:] and children(tree[1]) == []
        assert is_running(child.pid) and is_running(tree[1])
        assert child.stdout.readline() == "spun\n"
        assert cpu_seconds([child.pid]) >= 0.25  # it spun 0.3 s of CPU time before saying so
        assert rss_mb([child.pid]) > 60
        assert peak_rss_mb([child.pid]) >= rss_mb([child.pid])
        assert peak_rss_mb(tree) > peak_rss_mb([child.pid])  # the grandchild is charged too
    finally:
        for pid in descendants(child.pid)[1:]:
            os.kill(pid, 9)
        child.kill()
        child.wait()
    assert not is_running(child.pid)


def test_a_process_that_is_gone_counts_as_zero() -> None:
    done = subprocess.run([sys.executable, "-c", "pass"], check=True)
    assert done.returncode == 0
    gone = 2**22 + 12345  # above the default pid_max: never a live process
    assert cpu_seconds([gone]) == 0.0 and rss_mb([gone]) == 0.0 and descendants(gone) == [gone]
    assert not is_running(gone) and children(gone) == []


def test_own_cpu_grows_with_work() -> None:
    before = sum(own_cpu_seconds())  # the user/system split is sampled by the kernel; the sum is not
    end = time.process_time() + 0.05
    while time.process_time() < end:
        pass
    assert sum(own_cpu_seconds()) >= before + 0.04
