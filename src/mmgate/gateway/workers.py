"""Several gateway processes on one port (``mmgate serve --workers N``), for more than one core.

One Python process tops out at one core. With ``--workers N`` the parent binds the port with
``SO_REUSEPORT`` (to learn it when ``--port 0``), forks N workers that each open their own
listening socket on it with ``SO_REUSEPORT``, and the kernel spreads incoming *connections*
across them. The parent only supervises: it forwards SIGINT/SIGTERM, and when one worker dies it
stops the others and exits non-zero, so whatever restarts the gateway restarts all of it.

State-sharing choice: **workers share nothing in memory.** Each one is a complete gateway with its
own endpoint scraper (N times the ``/metrics`` traffic), its own in-flight load counts and its own
affinity indexes. Load-aware scorers therefore see about 1/N of the fleet's in-flight requests
(still a fair sample, since connections are spread evenly). Without ``mmgate.sharedIndex`` a
repeated prefix or image only meets its affinity record when it arrives at the same worker; with
it, the workers' prefix and encoder-cache indexes are one view through Redis
(:mod:`mmgate.datalayer.index.redis_mirror`; docs/precise.md), so affinity-heavy configs can use
more workers too.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sys
import traceback
from collections.abc import Callable


def bind_shared(host: str, port: int) -> socket.socket:
    """A bound (not listening) SO_REUSEPORT socket that reserves ``port`` (0 = pick one)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    return sock


def serve_workers(count: int, host: str, port: int, serve_one: Callable[[int], int]) -> int:
    """Fork ``count`` workers running ``serve_one(port)``; supervise them; return an exit code."""
    if not hasattr(socket, "SO_REUSEPORT") or not hasattr(os, "fork"):
        print("mmgate serve: --workers needs SO_REUSEPORT and fork (Linux, BSD, macOS)", file=sys.stderr)
        return 2
    reserved = bind_shared(host, port)
    port = reserved.getsockname()[1]
    children: list[int] = []
    for _ in range(count):
        pid = os.fork()
        if pid == 0:  # worker
            reserved.close()
            code = 1
            try:
                code = serve_one(port)
            except BaseException:
                traceback.print_exc()
            finally:
                os._exit(code)
        children.append(pid)

    def forward(signum: int, _frame: object) -> None:
        for child in children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(child, signum)

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, forward)
    worst = 0
    alive = set(children)
    while alive:
        try:
            pid, status = os.wait()
        except ChildProcessError:
            break
        alive.discard(pid)
        code = os.waitstatus_to_exitcode(status)
        if code != 0 and alive:
            forward(signal.SIGTERM, None)  # one worker down: stop the rest, let the supervisor restart
        worst = worst or (code if code > 0 else 1 if code < 0 else 0)
    reserved.close()
    return worst
