"""Fault injection for reliability tests: what a flaky or overloaded pod does to a gateway.

Each request draws one outcome from the configured rates: an immediate 429, 500 or 503 (OpenAI error
shape, before any engine work), a connection reset after the first streamed token (the case a
gateway can no longer retry transparently), or normal service. ``slowdown`` stretches every engine
step; ``stall`` freezes the pod (requests are accepted, nothing progresses) until cleared or for a
number of seconds. All of it can be changed while running through ``/admin/faults``.
"""

from __future__ import annotations

import random
import time
from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import Any


class Outcome(StrEnum):
    SERVE = "serve"
    RATE_LIMIT = "429"
    SERVER_ERROR = "500"
    UNAVAILABLE = "503"
    RESET = "reset"


ERROR_STATUS = {Outcome.RATE_LIMIT: 429, Outcome.SERVER_ERROR: 500, Outcome.UNAVAILABLE: 503}
ERROR_TYPE = {
    Outcome.RATE_LIMIT: "rate_limit_exceeded",
    Outcome.SERVER_ERROR: "server_error",
    Outcome.UNAVAILABLE: "service_unavailable",
}


@dataclass(slots=True)
class FaultSettings:
    """Rates are per-request probabilities in [0, 1]; their sum must not exceed 1."""

    rate_429: float = 0.0
    rate_500: float = 0.0
    rate_503: float = 0.0
    rate_reset: float = 0.0
    slowdown: float = 1.0
    stalled: bool = False

    def validate(self) -> None:
        rates = (self.rate_429, self.rate_500, self.rate_503, self.rate_reset)
        if any(r < 0 or r > 1 for r in rates):
            raise ValueError("fault rates are probabilities between 0 and 1")
        if sum(rates) > 1 + 1e-9:
            raise ValueError("fault rates add up to more than 1")
        if self.slowdown <= 0:
            raise ValueError("slowdown must be a positive factor (1 = normal speed)")


class Faults:
    """The live fault state of one pod."""

    def __init__(self, settings: FaultSettings | None = None, *, seed: int | None = None) -> None:
        self.settings = settings or FaultSettings()
        self.settings.validate()
        self._rng = random.Random(seed)
        self._stall_until: float | None = None

    def draw(self) -> Outcome:
        s = self.settings
        if not (s.rate_429 or s.rate_500 or s.rate_503 or s.rate_reset):
            return Outcome.SERVE
        x = self._rng.random()
        for outcome, rate in (
            (Outcome.RATE_LIMIT, s.rate_429),
            (Outcome.SERVER_ERROR, s.rate_500),
            (Outcome.UNAVAILABLE, s.rate_503),
            (Outcome.RESET, s.rate_reset),
        ):
            if x < rate:
                return outcome
            x -= rate
        return Outcome.SERVE

    def stalled(self, now: float | None = None) -> bool:
        if self.settings.stalled:
            return True
        if self._stall_until is None:
            return False
        if (time.monotonic() if now is None else now) < self._stall_until:
            return True
        self._stall_until = None
        return False

    def stall_remaining(self) -> float | None:
        """Seconds until a timed stall ends, ``inf`` for an open-ended one, ``None`` if not stalled."""
        if self.settings.stalled:
            return float("inf")
        if self._stall_until is None:
            return None
        left = self._stall_until - time.monotonic()
        return left if left > 0 else None

    def update(self, changes: dict[str, Any]) -> None:
        """Apply a partial update (the admin endpoint's JSON); ``stall_for`` stalls for N seconds.

        Raises ``ValueError`` (naming the field) and leaves the state unchanged on a bad value.
        """
        known = {f for f in asdict(self.settings)}
        merged = asdict(self.settings)
        stall_for: float | None = None
        for key, value in changes.items():
            if key == "stall_for":
                stall_for = _number(key, value)
                if stall_for < 0:
                    raise ValueError("stall_for must be >= 0 seconds")
            elif key not in known:
                raise ValueError(
                    f"unknown fault setting {key!r}; known: {', '.join(sorted(known))}, stall_for"
                )
            elif key == "stalled":
                if not isinstance(value, bool):
                    raise ValueError("stalled must be true or false")
                merged[key] = value
            else:
                merged[key] = _number(key, value)
        candidate = FaultSettings(**merged)
        candidate.validate()
        self.settings = candidate
        if stall_for is not None:
            self._stall_until = time.monotonic() + stall_for if stall_for > 0 else None

    def snapshot(self) -> dict[str, Any]:
        out = asdict(self.settings)
        out["stall_remaining_s"] = self.stall_remaining()
        if out["stall_remaining_s"] == float("inf"):
            out["stall_remaining_s"] = None
        return out


def _number(key: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{key} must be a number")
    return float(value)
