"""A fleet-wide retry budget, so retries cannot multiply load when the whole fleet is failing.

Per-request attempts are capped elsewhere; this caps the *rate* of retries: over a sliding window
of about ``window_s`` seconds, retries may not exceed ``ratio`` x requests plus ``min_per_s`` x
window (the floor keeps a quiet gateway able to retry at all). This is the shape of Envoy's
``retry_budget`` and Finagle's RetryBudget.
"""

from __future__ import annotations

import time
from collections.abc import Callable


class RetryBudget:
    def __init__(
        self,
        *,
        ratio: float = 0.2,
        min_per_s: float = 10.0,
        window_s: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.ratio = ratio
        self.min_per_s = min_per_s
        self.half = window_s / 2
        self.clock = clock
        # Two half-window buckets: [older, current] of (requests, retries).
        self._start = clock()
        self._requests = [0, 0]
        self._retries = [0, 0]

    def _roll(self, now: float) -> None:
        elapsed = now - self._start
        if elapsed < self.half:
            return
        if elapsed < 2 * self.half:
            self._requests = [self._requests[1], 0]
            self._retries = [self._retries[1], 0]
        else:
            self._requests = [0, 0]
            self._retries = [0, 0]
        self._start = now - (elapsed % self.half)

    def on_request(self) -> None:
        now = self.clock()
        if now - self._start >= self.half:  # most requests fall inside the current half-window
            self._roll(now)
        self._requests[1] += 1

    def try_retry(self) -> bool:
        """Spend one retry if the budget allows it; False means fail the request now."""
        self._roll(self.clock())
        allowed = self.ratio * sum(self._requests) + self.min_per_s * 2 * self.half
        if sum(self._retries) + 1 > allowed:
            return False
        self._retries[1] += 1
        return True
