"""Per-endpoint circuit breaking (outlier ejection), so one sick pod stops costing every request a retry.

A pod can answer its ``/metrics`` scrape perfectly and still fail every request (a wedged engine,
a bad GPU, a 500 on every completion). Health by scrape never sees that; the requests do.
After ``consecutive_failures`` failed attempts in a row (5xx, connect errors, timeouts, resets,
streams broken midway; *not* 429, which is load shedding, not sickness) the endpoint is
**ejected** for ``base_ejection_s`` x 2^(ejections so far), capped at ``max_ejection_s``. When
that time is up it is **half-open**: exactly one live request may probe it (the scrape must also
say it is healthy, since only healthy endpoints are candidates). A good probe closes the breaker
and resets the back-off; a bad one ejects it again for longer. This is the shape of Envoy's
outlier detection (consecutive_5xx, base_ejection_time, panic threshold).

If every candidate is ejected the breaker steps aside (Envoy's panic mode): a fleet that is all
failing is better served by trying than by refusing everything at the gateway.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol, TypeVar


class State(StrEnum):
    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


@dataclass(slots=True)
class BreakerSettings:
    consecutive_failures: int = 5  # 0 disables circuit breaking
    base_ejection_s: float = 5.0
    max_ejection_s: float = 60.0


@dataclass(slots=True)
class _Endpoint:
    failures: int = 0  # consecutive
    ejections: int = 0  # consecutive ejections (back-off exponent); reset by a success
    open_until: float = 0.0
    probing: bool = False  # a half-open probe is in flight
    state: State = State.CLOSED


class Named(Protocol):
    @property
    def name(self) -> str: ...


N = TypeVar("N", bound=Named)


class Breaker:
    """Breaker state for every endpoint; all calls are O(1) and never block."""

    def __init__(
        self,
        settings: BreakerSettings | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        on_change: Callable[[str, State], None] | None = None,
    ) -> None:
        self.settings = settings or BreakerSettings()
        self.clock = clock
        self.on_change = on_change
        self._eps: dict[str, _Endpoint] = {}
        self._tripped = 0  # endpoints not CLOSED: while 0, every candidate is usable

    @property
    def enabled(self) -> bool:
        return self.settings.consecutive_failures > 0

    @property
    def tripped(self) -> int:
        """How many endpoints are ejected or on probation (not CLOSED); while none is,
        :meth:`filter` passes every candidate without looking at each."""
        return self._tripped

    def state(self, name: str) -> State:
        ep = self._eps.get(name)
        if ep is None:
            return State.CLOSED
        if ep.state is State.OPEN and self.clock() >= ep.open_until:
            self._set(name, ep, State.HALF_OPEN)
        return ep.state

    def usable(self, name: str) -> bool:
        """May a request be sent to ``name`` now (closed, or half-open with no probe in flight)?"""
        state = self.state(name)
        if state is State.CLOSED:
            return True
        return state is State.HALF_OPEN and not self._eps[name].probing

    def filter(self, candidates: list[N]) -> list[N]:
        """The usable candidates; all of them when none is (panic mode). While nothing is
        tripped (the common case, checked first) that is ``candidates`` itself, not a copy: the
        caller passes a list it owns, made for this request."""
        if not self._tripped or not self.enabled:
            return candidates
        usable = [c for c in candidates if self.usable(c.name)]
        return usable or candidates

    def begin(self, name: str) -> None:
        """An attempt is being sent to ``name``: a half-open endpoint's one probe is taken."""
        ep = self._eps.get(name)
        if ep is not None and self.state(name) is State.HALF_OPEN:
            ep.probing = True

    def success(self, name: str) -> None:
        ep = self._eps.get(name)
        if ep is None:
            return
        ep.failures = 0
        ep.ejections = 0
        ep.probing = False
        if ep.state is not State.CLOSED:
            self._set(name, ep, State.CLOSED)

    def failure(self, name: str) -> None:
        if not self.enabled:
            return
        ep = self._eps.setdefault(name, _Endpoint())
        state = self.state(name)
        ep.failures += 1
        if state is State.HALF_OPEN or (
            state is State.CLOSED and ep.failures >= self.settings.consecutive_failures
        ):
            s = self.settings
            ep.open_until = self.clock() + min(s.max_ejection_s, s.base_ejection_s * 2**ep.ejections)
            ep.ejections += 1
            ep.probing = False
            self._set(name, ep, State.OPEN)

    def release(self, name: str) -> None:
        """An attempt ended with neither verdict (e.g. the client left): free the probe slot."""
        ep = self._eps.get(name)
        if ep is not None:
            ep.probing = False

    def forget(self, name: str) -> None:
        ep = self._eps.pop(name, None)
        if ep is not None and ep.state is not State.CLOSED:
            self._tripped -= 1

    def _set(self, name: str, ep: _Endpoint, state: State) -> None:
        self._tripped += (state is not State.CLOSED) - (ep.state is not State.CLOSED)
        ep.state = state
        if self.on_change is not None:
            self.on_change(name, state)
