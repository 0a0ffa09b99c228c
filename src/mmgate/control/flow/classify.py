"""Which flow a request belongs to and how urgent it is: the flow key and the TTFT deadline.

The flow key is llm-d's: a fairness id and a priority. The fairness id is the client's
``x-gateway-inference-fairness-id`` header, else the verified API key's tenant (authentication
on), else ``default-flow`` (llm-d's default), so with authentication on tenants are told apart
without any header and a client cannot pose as another tenant by omitting it. The priority is
the InferenceObjective named by ``x-gateway-inference-objective`` (GIE's header); an unknown or
absent name is priority 0, as llm-d treats a request without an objective. A negative priority
is sheddable: refused first under pressure, never held past a saturated pool for long.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import msgspec

FAIRNESS_ID_HEADER = "x-gateway-inference-fairness-id"
OBJECTIVE_HEADER = "x-gateway-inference-objective"
TTFT_SLO_HEADER = "x-slo-ttft-ms"  # llm-d's predicted-latency header, read by EDF ordering too
DEFAULT_FLOW = "default-flow"
MAX_FAIRNESS_ID = 128
"""Longest fairness id kept (longer ones are cut): the id is client input and labels metrics."""


@dataclass(slots=True, frozen=True)
class Objective:
    """An InferenceObjective: its priority and, for EDF ordering, a TTFT target (seconds)."""

    name: str
    priority: int = 0
    ttft_target_s: float | None = None


class FlowKey(msgspec.Struct, frozen=True):
    """A flow: (fairness id, priority). A msgspec struct: one is made per request, in C."""

    fairness_id: str
    priority: int

    @property
    def sheddable(self) -> bool:
        return self.priority < 0


class Classifier:
    """Classifies requests against the configured objectives."""

    def __init__(self, objectives: Iterable[Objective] = ()) -> None:
        self._objectives = {o.name: o for o in objectives}

    def classify(self, headers: Mapping[str, str], tenant: str | None) -> FlowKey:
        fairness = headers.get(FAIRNESS_ID_HEADER) or tenant or DEFAULT_FLOW
        objective = self._objectives.get(headers.get(OBJECTIVE_HEADER) or "")
        priority = objective.priority if objective is not None else 0
        return FlowKey(fairness[:MAX_FAIRNESS_ID], priority)

    def ttft_target(self, headers: Mapping[str, str]) -> float | None:
        """The request's TTFT target: the header's, else its objective's (``None``: neither)."""
        target = _target(headers.get(TTFT_SLO_HEADER))
        if target is None:
            objective = self._objectives.get(headers.get(OBJECTIVE_HEADER) or "")
            if objective is not None:
                target = objective.ttft_target_s
        return target


def _target(raw: str | None) -> float | None:
    """The header's milliseconds as seconds; ``None`` when absent or not a positive number."""
    if not raw:
        return None
    try:
        ms = float(raw)
    except ValueError:
        return None
    return ms / 1000.0 if ms > 0 and ms == ms and ms != float("inf") else None
