"""What the role filters share: llm-d's ``llm-d.ai/role`` label values each stage accepts."""

from __future__ import annotations

from mmgate.scheduling.framework import Filter, NoParams
from mmgate.scheduling.types import ROLE_LABEL, EndpointState, SchedulingRequest


class RoleFilter(Filter[NoParams]):
    """Keep endpoints whose role is in ``roles`` (and unlabelled ones when ``accept_unlabelled``)."""

    roles: frozenset[str] = frozenset()
    accept_unlabelled = False

    def filter(self, request: SchedulingRequest, endpoints: list[EndpointState]) -> list[EndpointState]:
        roles = self.roles
        keep_none = self.accept_unlabelled
        out = []
        for ep in endpoints:
            # EndpointState.effective_role written out: three profiles filter every endpoint of
            # the fleet by role on each disaggregated decision.
            role = ep.role if ep.role is not None else ep.labels.get(ROLE_LABEL)
            if (role is None and keep_none) or role in roles:
                out.append(ep)
        return out
