"""The hooks that follow a request after its decision (llm-d's request-control extension points).

They are capabilities mixed into a plugin, not kinds of plugin: one plugin may record where content
went (:class:`PreRequest`), follow the request's load until it ends (:class:`RequestLifecycle`) and
score endpoints, all at once. The scheduler calls them (:mod:`mmgate.scheduling.scheduler`,
:mod:`mmgate.scheduling.inflight`); the request controller says when.
"""

from __future__ import annotations

from typing import ClassVar

from mmgate.scheduling.types import EndpointState, SchedulingRequest, SchedulingResult


class PreRequest:
    """Mixed into a plugin that runs after the decision (llm-d PreRequest): to record where
    content went, or to set the routing headers the request must carry. The hooks are
    capabilities, not kinds: one plugin may have several.

    ``before_send`` says which: True for hooks whose effect the upstream request needs (they set
    headers with :meth:`SchedulingRequest.set_upstream_header` and must run before it is sent);
    False for hooks that only update indexes, which callers may run after sending.
    """

    before_send: ClassVar[bool] = False
    routing_header: ClassVar[str] = ""
    """The header a ``before_send`` hook sets, if any (the build adds a default handler for a
    disaggregated stage only when no plugin sets its header)."""

    def pre_request(self, request: SchedulingRequest, result: SchedulingResult, now: float) -> None:
        raise NotImplementedError


class RequestLifecycle:
    """Mixed into a plugin that follows a request after it is sent: in-flight accounting (llm-d's
    ResponseBody hooks)."""

    def on_started(
        self, request: SchedulingRequest, endpoint: EndpointState, profile: str, now: float
    ) -> None:
        pass

    def on_first_token(self, request: SchedulingRequest, now: float) -> None:
        pass

    def on_stage_done(self, request: SchedulingRequest, endpoint: EndpointState, now: float) -> None:
        """A stage pod (encode, prefill) finished its legs of the request before the first token
        (:meth:`Scheduler.on_stage_done`): what it held for the request may go."""

    def on_finished(self, request: SchedulingRequest, now: float) -> None:
        pass
