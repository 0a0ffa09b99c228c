"""The affinity gate shared by the prefix and encoder affinity filters.

Stickiness is worth a wait only up to what it saves: keep the endpoints that hold enough of the
request's cached work, unless the best of them would make the request wait longer than the best
other endpoint by more than ``max_penalty_ms``. The wait is estimated as in-flight tokens over the
fleet's peak prefill throughput (llm-d's ``prefillThroughput`` TTFT source).
"""

from __future__ import annotations

from collections.abc import Mapping

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
    matched: Mapping[str, int],
    total: float,
    threshold: float,
    max_penalty_ms: float,
    peak_prefill_tokens_per_s: float,
) -> tuple[list[EndpointState], str]:
    """The endpoints to keep and why: ``sticky``, ``no-match`` or ``load-override``.

    An endpoint holds ``matched[name] / total`` of the request's cached work (``total`` > 0: the
    prompt's blocks, or its media's tokens). One pass (the filter is on the decision path) finds
    the sticky endpoints and the fewest in-flight tokens on either side.
    """
    sticky: list[EndpointState] = []
    others = 0
    low_sticky = low_other = 0
    for ep in endpoints:
        tokens = ep.inflight.tokens
        if matched.get(ep.name, 0) / total >= threshold:
            if not sticky or tokens < low_sticky:
                low_sticky = tokens
            sticky.append(ep)
        else:
            if not others or tokens < low_other:
                low_other = tokens
            others += 1
    if not sticky:
        return endpoints, "no-match"
    if max_penalty_ms > 0 and others:
        per_token_ms = 1000.0 / peak_prefill_tokens_per_s
        if low_sticky * per_token_ms - low_other * per_token_ms > max_penalty_ms:
            return endpoints, "load-override"
    return sticky, "sticky"
