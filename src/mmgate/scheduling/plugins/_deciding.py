"""Deciders: should this request get a separate encode (or prefill) stage? Named by the
``disagg-profile-handler``'s ``deciders`` parameter and asked after the decode profile ran."""

from __future__ import annotations

from mmgate.scheduling.contracts import ParamsT, Plugin
from mmgate.scheduling.types import EndpointState, SchedulingRequest


class Decider(Plugin[ParamsT]):
    def disaggregate(self, request: SchedulingRequest, decode_target: EndpointState) -> bool:
        raise NotImplementedError
