"""Whether an endpoint should receive traffic, from scrapes and from proxied requests.

A new endpoint is routable until proven otherwise (the proxy retries elsewhere if it is not).
``failure_threshold`` consecutive failures (scrape errors, connect errors) take it out of
rotation; the next success brings it back. Hardening (circuit breaking with half-open probes)
builds on the same two calls, :meth:`Health.record_success` and :meth:`Health.record_failure`.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class Health:
    failure_threshold: int = 3
    consecutive_failures: int = 0
    healthy: bool = True
    ever_succeeded: bool = False
    last_error: str | None = None

    def record_success(self) -> bool:
        """Note a success; return True when this flips the endpoint back to healthy."""
        self.consecutive_failures = 0
        self.ever_succeeded = True
        self.last_error = None
        if self.healthy:
            return False
        self.healthy = True
        return True

    def record_failure(self, reason: str) -> bool:
        """Note a failure; return True when this takes the endpoint out of rotation."""
        self.consecutive_failures += 1
        self.last_error = reason
        if self.healthy and self.consecutive_failures >= self.failure_threshold:
            self.healthy = False
            return True
        return False
