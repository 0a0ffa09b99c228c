"""What the role filters share: llm-d's ``llm-d.ai/role`` label values each stage accepts.

A disaggregated decision runs three profiles, each filtering the whole fleet by role, and the
fleet is the same from one decision to the next. So each filter remembers what it kept for the
last few fleets (the tuple of endpoint states, by identity): an endpoint's role and labels are
fixed for the life of its :class:`~mmgate.scheduling.types.EndpointState` (the data layer makes a
new state when they change), so the same states keep the same roles.
"""

from __future__ import annotations

from mmgate.scheduling.contracts import EndpointAware, Filter, NoParams, PluginHandle
from mmgate.scheduling.types import EndpointState, SchedulingRequest

FLEETS = 16  # distinct endpoint lists remembered per filter (pools, breaker-trimmed lists)


class RoleFilter(Filter[NoParams], EndpointAware):
    """Keep endpoints whose role is in ``roles`` (and unlabelled ones when ``accept_unlabelled``)."""

    roles: frozenset[str] = frozenset()
    accept_unlabelled = False

    def __init__(self, name: str, params: NoParams, handle: PluginHandle) -> None:
        super().__init__(name, params, handle)
        self._kept: dict[tuple[EndpointState, ...], list[EndpointState]] = {}

    def filter(self, request: SchedulingRequest, endpoints: list[EndpointState]) -> list[EndpointState]:
        fleet = tuple(endpoints)
        kept = self._kept.get(fleet)
        if kept is None:
            kept = self.takes(fleet)
            if len(self._kept) >= FLEETS:
                self._kept.clear()
            self._kept[fleet] = kept
        return list(kept)

    def takes(self, endpoints: tuple[EndpointState, ...]) -> list[EndpointState]:
        roles = self.roles
        keep_none = self.accept_unlabelled
        out = []
        for ep in endpoints:
            role = ep.effective_role
            if (role is None and keep_none) or role in roles:
                out.append(ep)
        return out

    def remove_endpoint(self, name: str) -> None:
        """A removed endpoint's lists go (they would keep its state alive)."""
        for fleet in [f for f in self._kept if any(ep.name == name for ep in f)]:
            del self._kept[fleet]
