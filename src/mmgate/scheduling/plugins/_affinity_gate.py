"""The affinity gate shared by the prefix and encoder affinity filters.

Stickiness is worth a wait only up to what it saves: keep the endpoints that hold enough of the
request's cached work, unless the best of them would make the request wait longer than the best
other endpoint by more than ``max_penalty_ms``. The wait is estimated as in-flight tokens over the
fleet's peak prefill throughput (llm-d's ``prefillThroughput`` TTFT source).
"""

from __future__ import annotations

from collections.abc import Callable

from mmgate.scheduling.types import EndpointState


def check_gate_params(threshold: float, max_penalty_ms: float, peak_prefill_tokens_per_s: float) -> None:
    """Refuse gate settings that cannot work, at configuration time (both filters share them)."""
    if not 0.0 <= threshold <= 1.0:
        raise ValueError(f"affinityThreshold must be in [0, 1], got {threshold}")
    if max_penalty_ms < 0:
        raise ValueError(f"maxTTFTPenaltyMs must be >= 0, got {max_penalty_ms}")
    if max_penalty_ms > 0 and peak_prefill_tokens_per_s <= 0:
        raise ValueError("peakPrefillThroughput must be > 0 when maxTTFTPenaltyMs > 0")


def gate(
    endpoints: list[EndpointState],
    ratio: Callable[[str], float],
    threshold: float,
    max_penalty_ms: float,
    peak_prefill_tokens_per_s: float,
) -> tuple[list[EndpointState], str]:
    """The endpoints to keep and why: ``sticky``, ``no-match`` or ``load-override``."""
    sticky: list[EndpointState] = []
    others: list[EndpointState] = []
    for ep in endpoints:
        (sticky if ratio(ep.name) >= threshold else others).append(ep)
    if not sticky:
        return endpoints, "no-match"
    if max_penalty_ms > 0 and others:
        per_token_ms = 1000.0 / peak_prefill_tokens_per_s
        best_sticky = min(ep.inflight.tokens for ep in sticky) * per_token_ms
        best_other = min(ep.inflight.tokens for ep in others) * per_token_ms
        if best_sticky - best_other > max_penalty_ms:
            return endpoints, "load-override"
    return sticky, "sticky"
