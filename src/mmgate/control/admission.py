"""Admission control: a bounded number of requests in flight, a bounded FIFO queue behind them,
optional per-client limits, and a clear 429 + ``Retry-After`` for everything beyond.

Overload must be shed, not queued forever: an unbounded queue turns a burst into minutes of
latency for everyone and memory the gateway cannot give back. A request that finds every slot
taken waits in the queue (if ``max_queue`` allows) for at most ``queue_timeout_s``; a slot that
frees up is handed to the oldest waiter directly, so late arrivals cannot overtake it. A request
that finds the queue full, or waits too long, or whose client already holds
``per_client_inflight`` requests (in flight or queued), is refused at once.

Clients are told apart by a digest of their ``Authorization`` header (the key itself is never
kept), else by their address.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass

import xxhash


@dataclass(slots=True)
class AdmissionSettings:
    max_queue: int = 0  # requests waiting for a slot beyond the in-flight limit (0: refuse at once)
    queue_timeout_s: float = 5.0  # longest wait in the queue before a 429
    per_client_inflight: int = 0  # requests one client may have in flight or queued (0: no limit)
    retry_after_s: int = 1


class Overloaded(Exception):
    """Refused by admission control; ``retry_after_s`` goes into the ``Retry-After`` header."""

    def __init__(self, message: str, retry_after_s: int) -> None:
        super().__init__(message)
        self.message = message
        self.retry_after_s = retry_after_s


def client_key(headers: Mapping[str, str], remote: str | None) -> str:
    """Who is asking: a digest of the API key when there is one, else the peer address."""
    auth = headers.get("Authorization") or headers.get("x-api-key")
    if auth:
        return "key:" + xxhash.xxh3_64_hexdigest(auth.encode())
    return "addr:" + (remote or "-")


class Admission:
    """Slots, queue and per-client counts of one gateway process (one event loop)."""

    def __init__(self, settings: AdmissionSettings | None = None) -> None:
        self.settings = settings or AdmissionSettings()
        self.inflight = 0
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._per_client: dict[str, int] = {}

    @property
    def queued(self) -> int:
        return sum(1 for w in self._waiters if not w.done())

    async def enter(self, limit: int, client: str) -> None:
        """Take a slot (waiting in the queue if allowed); raises :class:`Overloaded`.

        ``limit`` is the in-flight limit (0: none). Every successful ``enter`` needs one ``leave``.
        """
        s = self.settings
        held = self._per_client.get(client, 0)
        if s.per_client_inflight and held >= s.per_client_inflight:
            raise Overloaded(
                f"this client already has {held} requests in flight; the limit is {s.per_client_inflight}",
                s.retry_after_s,
            )
        if not limit or (self.inflight < limit and not self.queued):
            self._take(client)
            return
        if self.queued >= s.max_queue:
            where = f"and {s.max_queue} queued " if s.max_queue else ""
            raise Overloaded(
                f"the gateway is at its limit of {limit} requests in flight {where}; retry shortly",
                s.retry_after_s,
            )
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        self._per_client[client] = held + 1  # a queued request counts against its client
        try:
            await asyncio.wait_for(asyncio.shield(waiter), s.queue_timeout_s)
        except (TimeoutError, asyncio.CancelledError) as exc:
            self._drop_client(client)
            if waiter.done() and not waiter.cancelled():
                self._release_slot()  # a slot was handed over just as we gave up: pass it on
            else:
                waiter.cancel()
                with contextlib.suppress(ValueError):
                    self._waiters.remove(waiter)
            if isinstance(exc, asyncio.CancelledError):
                raise
            raise Overloaded(
                f"no slot freed up within {s.queue_timeout_s:g} s (limit {limit} in flight); retry shortly",
                s.retry_after_s,
            ) from None
        # The slot was handed over by leave(): inflight already counts it; the client's count stays.

    def leave(self, client: str) -> None:
        self._drop_client(client)
        self._release_slot()

    def _take(self, client: str) -> None:
        self.inflight += 1
        self._per_client[client] = self._per_client.get(client, 0) + 1

    def _release_slot(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)  # the slot moves to the oldest waiter; inflight unchanged
                return
        self.inflight -= 1

    def _drop_client(self, client: str) -> None:
        n = self._per_client.get(client, 0) - 1
        if n > 0:
            self._per_client[client] = n
        else:
            self._per_client.pop(client, None)
