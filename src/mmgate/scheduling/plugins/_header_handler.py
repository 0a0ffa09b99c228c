"""What the routing-header handlers share: name a stage's pods in a header for the primary pod.

In a disaggregated topology the request goes to the decode pod; the routing sidecar beside it
(llm-d's pd-sidecar) reads which encode and prefill pods to use from headers the endpoint picker
set (llm-d ``pkg/common/routing``). The picker's config decides the topology, so these headers
come from PreRequest plugins in that config, not from gateway code. They run before the request is
sent (``before_send``): the request is useless to the sidecar without them.
"""

from __future__ import annotations

from typing import ClassVar

from mmgate.scheduling.contracts import ParamsT, Plugin, PluginHandle
from mmgate.scheduling.lifecycle import PreRequest
from mmgate.scheduling.types import ENCODERS_HEADER, PREFILLER_HEADER, SchedulingRequest, SchedulingResult

__all__ = ["ENCODERS_HEADER", "PREFILLER_HEADER", "HeaderHandler"]


class HeaderHandler(Plugin[ParamsT], PreRequest):
    """Set ``routing_header`` to the ``host:port`` of the targets of one profile when it ran.

    ``first_only``: the prefill stage names one pod (llm-d's sidecar takes the first anyway);
    the encode stage names every chosen encoder, comma-joined, for the sidecar's fan-out.
    ``profile`` is the profile's name, read from the parameters once (the hook runs per request).
    """

    before_send: ClassVar[bool] = True
    first_only: ClassVar[bool] = False

    def __init__(self, name: str, params: ParamsT, handle: PluginHandle) -> None:
        super().__init__(name, params, handle)
        self.profile = self.profile_of(params)

    def profile_of(self, params: ParamsT) -> str:
        raise NotImplementedError

    def pre_request(self, request: SchedulingRequest, result: SchedulingResult, now: float) -> None:
        ran = result.profiles.get(self.profile)
        if ran is None or not ran.targets:
            return
        targets = ran.targets
        if self.first_only or len(targets) == 1:
            request.set_upstream_header(self.routing_header, targets[0].name)
        else:
            request.set_upstream_header(self.routing_header, ",".join([t.name for t in targets]))
