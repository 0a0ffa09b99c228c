"""Admission control: a bounded number of requests in flight, a bounded FIFO queue behind them,
optional per-client limits, and a clear 429 + ``Retry-After`` for everything beyond.

Overload must be shed, not queued forever: an unbounded queue turns a burst into minutes of
latency for everyone and memory the gateway cannot give back. A request that finds every slot
taken waits in the queue (if ``max_queue`` allows) for at most ``queue_timeout_s``; a slot that
frees up is handed to the oldest waiter directly, so late arrivals cannot overtake it. A request
that finds the queue full, or waits too long, or whose client already holds
``per_client_inflight`` requests (in flight or queued), is refused at once.

Clients are told apart by a digest of their ``Authorization`` header (the key itself is never
kept), else by their address; with authentication on, by their verified tenant. A verified key may
carry its own limits (:class:`~mmgate.control.apikeys.Identity`): requests in flight or queued at
once, and a sustained rate with a burst (a token bucket per key). Both are checked before the
global slots, so one tenant's burst is refused without taking a place in the shared queue.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import xxhash

from mmgate.control.apikeys import Identity


@dataclass(slots=True)
class AdmissionSettings:
    max_queue: int = 0  # requests waiting for a slot beyond the in-flight limit (0: refuse at once)
    queue_timeout_s: float = 5.0  # longest wait in the queue before a 429
    per_client_inflight: int = 0  # requests one client may have in flight or queued (0: no limit)
    retry_after_s: int = 1


class Overloaded(Exception):
    """Refused by admission or flow control; ``retry_after_s`` goes into the ``Retry-After``
    header, ``status`` is the answer's (429, or 503 when the gateway itself is full: flow
    control's byte bound, a request held for its whole TTL), ``code`` the error's code:
    ``overloaded`` when the gateway as a whole is full, ``rate_limit_exceeded`` when the client or
    its API key is at its own limit (OpenAI's code for a 429 the caller can fix by slowing down;
    SDKs and dashboards key on it)."""

    def __init__(
        self, message: str, retry_after_s: int, *, status: int = 429, code: str = "overloaded"
    ) -> None:
        super().__init__(message)
        self.message = message
        self.retry_after_s = retry_after_s
        self.status = status
        self.code = code


CLIENT_LIMIT = "rate_limit_exceeded"


def client_key(headers: Mapping[str, str], remote: str | None) -> str:
    """Who is asking: a digest of the API key when there is one, else the peer address."""
    auth = headers.get("Authorization") or headers.get("x-api-key")
    if auth:
        return "key:" + xxhash.xxh3_64_hexdigest(auth.encode())
    return "addr:" + (remote or "-")


class Admission:
    """Slots, queue and per-client counts of one gateway process (one event loop)."""

    def __init__(
        self, settings: AdmissionSettings | None = None, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.settings = settings or AdmissionSettings()
        self.inflight = 0
        self._clock = clock
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._per_client: dict[str, int] = {}
        self._per_key: dict[str, int] = {}  # requests in flight or queued per verified key
        self._buckets: dict[str, tuple[float, float]] = {}  # key id -> (tokens, when)

    @property
    def queued(self) -> int:
        return sum(1 for w in self._waiters if not w.done())

    async def enter(self, limit: int, client: str, identity: Identity | None = None) -> None:
        """Take a slot (waiting in the queue if allowed); raises :class:`Overloaded`.

        ``limit`` is the in-flight limit (0: none); ``identity`` the verified key, whose own
        limits apply too. Every successful ``enter`` needs one ``leave`` with the same arguments.
        """
        if identity is not None:
            self._check_key(identity)
            self._per_key[identity.key_id] = self._per_key.get(identity.key_id, 0) + 1
            try:
                if not self.enter_now(limit, client):
                    await self._wait(limit, client)
            except BaseException:
                self._drop_key(identity)
                raise
            return
        if not self.enter_now(limit, client):
            await self._wait(limit, client)

    def enter_now(self, limit: int, client: str) -> bool:
        """Take a free slot now if there is one (nobody queued ahead), without a coroutine: the
        common case. False: nothing was taken, ``client`` must wait in the queue (:meth:`enter`).
        Raises :class:`Overloaded` at the client's own limit. For a request without a verified
        key (whose own limits only :meth:`enter` checks); it needs one :meth:`leave` too."""
        s = self.settings
        per_client = s.per_client_inflight
        held = 0
        if per_client:  # clients are counted only when a per-client limit reads the counts
            held = self._per_client.get(client, 0)
            if held >= per_client:
                raise Overloaded(
                    f"this client already has {held} requests in flight; the limit is {per_client}",
                    s.retry_after_s,
                    code=CLIENT_LIMIT,
                )
        if not limit or (self.inflight < limit and not self.queued):
            self.inflight += 1
            if per_client:
                self._per_client[client] = held + 1
            return True
        return False

    @property
    def counts_clients(self) -> bool:
        """Whether requests are told apart by client (a per-client limit is set): without one,
        the ``client`` passed in is never read."""
        return self.settings.per_client_inflight > 0

    async def _wait(self, limit: int, client: str) -> None:
        """Queue for a slot (``leave`` hands it over), or raise :class:`Overloaded`."""
        s = self.settings
        held = self._per_client.get(client, 0) if s.per_client_inflight else 0
        if self.queued >= s.max_queue:
            where = f"and {s.max_queue} queued " if s.max_queue else ""
            raise Overloaded(
                f"the gateway is at its limit of {limit} requests in flight {where}; retry shortly",
                s.retry_after_s,
            )
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        if s.per_client_inflight:
            self._per_client[client] = held + 1  # a queued request counts against its client
        try:
            await asyncio.wait_for(asyncio.shield(waiter), s.queue_timeout_s)
        except (TimeoutError, asyncio.CancelledError) as exc:
            if s.per_client_inflight:
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

    def leave(self, client: str, identity: Identity | None = None) -> None:
        if identity is not None:
            self._drop_key(identity)
        if self.settings.per_client_inflight:
            self._drop_client(client)
        self._release_slot()

    def _check_key(self, identity: Identity) -> None:
        """The key's own limits: in flight (or queued) at once, then its token bucket."""
        retry_after = self.settings.retry_after_s
        held = self._per_key.get(identity.key_id, 0)
        if identity.max_inflight and held >= identity.max_inflight:
            raise Overloaded(
                f"this API key already has {held} requests in flight; its limit is {identity.max_inflight}",
                retry_after,
                code=CLIENT_LIMIT,
            )
        rate = identity.rate_per_s
        if not rate:
            return
        now = self._clock()
        tokens, when = self._buckets.get(identity.key_id, (identity.burst, now))
        tokens = min(identity.burst, tokens + (now - when) * rate)
        if tokens < 1.0:
            self._buckets[identity.key_id] = (tokens, now)
            wait = math.ceil((1.0 - tokens) / rate)
            message = f"this API key is limited to {rate:g} requests/s; retry shortly"
            raise Overloaded(message, max(1, wait), code=CLIENT_LIMIT)
        self._buckets[identity.key_id] = (tokens - 1.0, now)

    def _drop_key(self, identity: Identity) -> None:
        n = self._per_key.get(identity.key_id, 0) - 1
        if n > 0:
            self._per_key[identity.key_id] = n
        else:
            self._per_key.pop(identity.key_id, None)

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
