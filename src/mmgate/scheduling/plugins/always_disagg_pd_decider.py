"""``always-disagg-pd-decider``: always run a separate prefill stage."""

from __future__ import annotations

from mmgate.scheduling.contracts import NoParams
from mmgate.scheduling.plugins._deciding import Decider
from mmgate.scheduling.types import EndpointState, SchedulingRequest


class AlwaysDisaggPDDecider(Decider[NoParams]):
    type_name = "always-disagg-pd-decider"

    def disaggregate(self, request: SchedulingRequest, decode_target: EndpointState) -> bool:
        return True
