"""Deciders: should this request get a separate encode (or prefill) stage? Named by the
``disagg-profile-handler``'s ``deciders`` parameter and asked after the decode profile ran."""

from __future__ import annotations

from mmgate.scheduling.contracts import ParamsT, Plugin
from mmgate.scheduling.types import EndpointState, SchedulingRequest


class Decider(Plugin[ParamsT]):
    def disaggregate(self, request: SchedulingRequest, decode_target: EndpointState) -> bool:
        raise NotImplementedError


class StagesPlannedHook:
    """Mixed into a plugin whose data about the serving pod depends on what the deciders planned
    (``predicted-ttft-producer``: media the encode decider leaves on the serving pod are encoded
    there, not received). The producers run before any profile, so they price the decode
    candidates before the deciders answer; ``disagg-profile-handler`` calls :meth:`stages_planned`
    once every decider has answered for the decode target, before the decision is reported or
    the request sent."""

    def stages_planned(self, request: SchedulingRequest, target: EndpointState) -> None:
        pass
