"""``always-disagg-pd-decider``: always run a separate prefill stage."""

from __future__ import annotations

from mmgate.scheduling.plugins._deciding import Decider
from mmgate.scheduling.registry import plugin
from mmgate.scheduling.types import EndpointState, SchedulingRequest


@plugin("always-disagg-pd-decider")
class AlwaysDisaggPDDecider(Decider):
    def disaggregate(self, request: SchedulingRequest, decode_target: EndpointState) -> bool:
        return True
