"""How much work each tier (role) of a disaggregated fleet holds, and how many pods it wants.

What the gateway knows of each pod, summed per role: the encoder seconds it placed there and has
not seen end (queued and in flight), the uncached prompt tokens of the requests it sent there and
has not seen a first token for (prefill still to do), and the requests in flight. From them::

    work_r     = encoder_seconds_r + prefill_tokens_r / prefillTokensPerSecond_r
    desired_r  = max(1, ceil(work_r / targetSeconds_r))          (encode, prefill, prefill-decode, ...)
    desired_D  = max(1, ceil(requests_D / targetRequests_D))     (decode: no prefill or encoder work)

``targetSeconds`` is the work a pod of the role may hold (queued plus in service) and still answer
within the latency its stage is given: a pod works one second a second, so the work drains in
``work / replicas`` seconds when nothing more arrives. A role holding more asks for more pods; as
its queues drain, for fewer. Exported as ``mmgate_tier_desired_replicas{role}`` beside its inputs,
for a HorizontalPodAutoscaler per tier (an External metric at ``averageValue: 1``: the autoscaler
then sets exactly this many replicas, within its min/max and stabilization window). Nothing here
does I/O.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass

DECODE_ROLE = "decode"


@dataclass(frozen=True, slots=True)
class TierDemand:
    """One role's load as the gateway sees it, and the pods it asks for."""

    role: str
    replicas: int
    encoder_seconds: float
    prefill_tokens: int
    requests: int
    work_seconds: float
    desired_replicas: int


@dataclass(frozen=True, slots=True)
class PodLoad:
    """One pod's part: its role, encoder seconds and prefill tokens held, requests in flight,
    and its prefill rate (seconds per token)."""

    role: str
    encoder_seconds: float
    prefill_tokens: int
    requests: int
    prefill_s_per_token: float


def tier_demand(
    pods: Iterable[PodLoad],
    target_seconds: Callable[[str], float],
    target_requests: float,
) -> list[TierDemand]:
    """Per role (in order of first appearance), the sums and the replicas the formula above asks
    for. ``target_seconds(role)`` > 0; ``target_requests`` > 0 (decode pods)."""
    sums: dict[str, list[float]] = {}
    for pod in pods:
        row = sums.setdefault(pod.role, [0, 0.0, 0, 0, 0.0])
        row[0] += 1
        row[1] += pod.encoder_seconds
        row[2] += pod.prefill_tokens
        row[3] += pod.requests
        row[4] += pod.encoder_seconds + pod.prefill_tokens * pod.prefill_s_per_token
    out = []
    for role, (replicas, encoder_s, tokens, requests, work) in sums.items():
        wanted = requests / target_requests if role == DECODE_ROLE else work / target_seconds(role)
        desired = max(1, math.ceil(wanted - 1e-9))
        out.append(TierDemand(role, int(replicas), encoder_s, int(tokens), int(requests), work, desired))
    return out


class TierSizer:
    """Mixed into a plugin that can say what each tier holds (read at the gateway's scrape)."""

    def tier_demand(self) -> list[TierDemand]:
        raise NotImplementedError
