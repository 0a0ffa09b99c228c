"""How a long-running mmgate process (gateway, endpoint picker, sidecar, simulated fleet, engine)
runs its event loop and learns that it should stop.

Process managers and Kubernetes ask a server to stop with SIGTERM (then SIGKILL after the pod's
``terminationGracePeriodSeconds``); a terminal sends SIGINT. Each server turns either into an
``asyncio.Event`` so it can drain and close its sockets instead of dying mid-response. A server
that registers the handlers before it starts listening also catches a signal sent during start-up.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import re
import signal
import socket
from collections.abc import Callable, Coroutine
from typing import Any


def stop_signal() -> asyncio.Event:
    """An event set at SIGINT or SIGTERM, registered on the running loop now.

    Where the platform has no loop signal handlers (Windows) the event is never set and the
    default behaviour (an exception at Ctrl-C) stays.
    """
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    return stop


async def wait_for_signal() -> None:
    """Return at SIGINT or SIGTERM."""
    await stop_signal().wait()


def run_forever(main: Callable[[], Coroutine[Any, Any, object]], *, use_uvloop: bool = True) -> None:
    """Run ``main()`` to completion on uvloop when available (every server's hot path is socket I/O)."""
    factory: Callable[[], asyncio.AbstractEventLoop] | None = None
    if use_uvloop:
        try:
            import uvloop

            factory = uvloop.new_event_loop
        except ImportError:  # pragma: no cover - uvloop is a dependency on POSIX
            factory = None
    with asyncio.Runner(loop_factory=factory) as runner:
        runner.run(main())


def listen_failure(exc: OSError, host: str, port: int | None = None, *, flag: str = "--port") -> str:
    """Why a server could not listen, in the terms of the flags that chose the address.

    The socket layer's own text (``[Errno 98] error while attempting to bind on address
    ('127.0.0.1', 8080): address already in use``, ``[Errno -2] Name or service not known``) names
    neither the flag nor the fix; the address it failed on is read from it when present (a server
    may listen on an API and an admin port).
    """
    bound = re.search(r"\('([^']*)', (\d+)", str(exc))
    if bound:
        host, port = bound[1], int(bound[2])
    where = f"port {port}" if port is not None else "the port"
    if isinstance(exc, socket.gaierror):
        return f"host {host!r} is not an address of this machine ({exc.strerror}); try --host 127.0.0.1"
    if exc.errno == errno.EADDRINUSE:
        return f"{where} is in use (another process listens there); choose another with {flag}"
    if exc.errno == errno.EADDRNOTAVAIL:
        return f"host {host!r} is not an address of this machine; try --host 127.0.0.1 or 0.0.0.0"
    if exc.errno == errno.EACCES:
        return f"{where} needs privileges to listen on (ports below 1024 do); choose another with {flag}"
    return f"cannot listen on {host}:{port}: {exc.strerror or exc}"
