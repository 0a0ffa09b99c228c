"""Which flow a request belongs to and how urgent it is: the flow key and the TTFT deadline.

The flow key is llm-d's: a fairness id and a priority. The fairness id is the client's
``x-gateway-inference-fairness-id`` header, else the verified API key's tenant (authentication
on), else ``default-flow`` (llm-d's default), so with authentication on tenants are told apart
without any header and a client cannot pose as another tenant by omitting it.

The priority is the InferenceObjective named by ``x-gateway-inference-objective`` (GIE's
header); else the API key's default (its ``objective``, or its ``priority``); else 0. A name that
names no objective counts as no name, as llm-d's director treats it (it logs and uses the default
priority rather than refusing the request): objectives come and go with Kubernetes resources,
and a client should not get a 400 because one was deleted a moment ago. A negative priority is
sheddable: refused first under pressure, never held past a saturated pool for long.

Objectives come from the config file and, with Kubernetes discovery, from the InferenceObjective
resources of the pool (:meth:`Classifier.discovered`). For a name both give, the resource's
priority wins: the resource is what the cluster's workload owners edit and what llm-d reads, the
file is the fallback; the file's ``ttftTargetMs`` is kept, as the resource has no such field.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import msgspec

from mmgate.control.apikeys import Identity

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
    """Classifies requests against the objectives of the config and of Kubernetes."""

    def __init__(self, objectives: Iterable[Objective] = ()) -> None:
        self._configured = {o.name: o for o in objectives}
        self._objectives = dict(self._configured)

    @property
    def objectives(self) -> Mapping[str, Objective]:
        """The objectives in force, by name (read-only)."""
        return self._objectives

    def discovered(self, priorities: Mapping[str, int]) -> None:
        """The InferenceObjective resources now in the cluster (name: priority) replace those
        found before; merged over the config's (the resource's priority wins, the config's TTFT
        target stays)."""
        merged = dict(self._configured)
        for name, priority in priorities.items():
            known = self._configured.get(name)
            merged[name] = Objective(name, priority, known.ttft_target_s if known is not None else None)
        self._objectives = merged  # one swap: a request classified meanwhile sees old or new

    def objective(self, headers: Mapping[str, str], identity: Identity | None) -> Objective | None:
        """The request's objective: the header's, else the API key's default (``None``: neither
        names a known one)."""
        objectives = self._objectives
        found = objectives.get(headers.get(OBJECTIVE_HEADER) or "")
        if found is None and identity is not None and identity.objective is not None:
            found = objectives.get(identity.objective)
        return found

    def classify(self, headers: Mapping[str, str], identity: Identity | None) -> FlowKey:
        tenant = identity.tenant if identity is not None else None
        fairness = headers.get(FAIRNESS_ID_HEADER) or tenant or DEFAULT_FLOW
        objective = self.objective(headers, identity) if self._objectives else None
        if objective is not None:
            priority = objective.priority
        elif identity is not None and identity.priority is not None:
            priority = identity.priority
        else:
            priority = 0
        return FlowKey(fairness[:MAX_FAIRNESS_ID], priority)

    def ttft_target(self, headers: Mapping[str, str], identity: Identity | None = None) -> float | None:
        """The request's TTFT target: the header's, else its objective's (``None``: neither)."""
        target = _target(headers.get(TTFT_SLO_HEADER))
        if target is None:
            objective = self.objective(headers, identity)
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
