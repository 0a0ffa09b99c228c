"""In-flight bookkeeping: which pods each started request holds, until it no longer does.

A request holds its serving pod until it ends, and in E/PD and E/P/D its stage pods (encode,
prefill) until their legs end or the first token arrives. Each pod's ``inflight.requests`` is the
load the scorers read; the lifecycle hooks (:class:`~mmgate.scheduling.lifecycle.RequestLifecycle`)
hear of every change so plugins with their own accounting (in-flight tokens, predicted TTFT) stay
in step. Clock-free: ``now`` is an argument.
"""

from __future__ import annotations

from collections.abc import Sequence

from mmgate.scheduling.lifecycle import RequestLifecycle
from mmgate.scheduling.types import EndpointState, SchedulingRequest, SchedulingResult


class StartedRequests:
    """The started requests of one scheduler and the pods each holds."""

    def __init__(self, hooks: Sequence[RequestLifecycle], primary_profile: str) -> None:
        self._hooks = list(hooks)
        self._primary = primary_profile
        self._active: dict[str, _Held] = {}

    def on_started(
        self, request: SchedulingRequest, endpoint: EndpointState, now: float, *, profile: str | None = None
    ) -> None:
        """The request is being sent to ``endpoint`` (for ``profile``, default the primary one)."""
        held = self._active.get(request.request_id)
        if held is None:
            held = self._active[request.request_id] = _Held(request, now)
        prof = profile or self._primary
        (held.serving if prof == self._primary else held.stages).append(endpoint)
        endpoint.inflight.requests += 1
        for hook in self._hooks:
            hook.on_started(request, endpoint, prof, now)

    def start(
        self,
        request: SchedulingRequest,
        result: SchedulingResult,
        now: float,
        *,
        target: EndpointState | None = None,
    ) -> None:
        """The request is being sent: every profile's targets carry its load.

        In E/PD and E/P/D the encode and prefill pods work for the request too, so they are
        charged with it (for their profile) besides the primary target, until its own legs end
        (:meth:`on_stage_done`) or else the first token (:meth:`on_first_token`); a pod chosen by
        two profiles is charged once. llm-d charges only the primary target.
        """
        if target is None:
            target = result.target
        self.on_started(request, target, now)
        profiles = result.profiles
        if len(profiles) == 1:
            return
        primary = result.primary_profile
        for name, profile in profiles.items():
            if name == primary or profile is None:
                continue
            for endpoint in profile.targets:
                if endpoint is not target:
                    self.on_started(request, endpoint, now, profile=name)

    def on_first_token(self, request_id: str, now: float) -> None:
        """The first response chunk arrived: prefill is done, and so is every stage leg (the
        decode pod answers only after the encode and prefill legs returned, in the sidecar as in
        the gateway), so the stage pods stop counting the request once the hooks saw it."""
        held = self._active.get(request_id)
        if held is None:
            return
        for hook in self._hooks:
            hook.on_first_token(held.request, now)
        if held.stages:  # none in an aggregated fleet: nothing to release
            _release(held.stages)

    def on_stage_done(self, request_id: str, endpoint: str, now: float) -> None:
        """Every leg of the request on the stage pod ``endpoint`` has ended: it stops counting
        the request now rather than at the first token. The transport that sends the legs knows
        this (the gateway-orchestrated mode), or a routing sidecar that says so (``mmgate
        sidecar``'s 103); behind one that does not, the first token releases every stage pod. Not
        a stage pod of the request: nothing."""
        held = self._active.get(request_id)
        if held is None:
            return
        for i, ep in enumerate(held.stages):
            if ep.name == endpoint:
                del held.stages[i]
                if ep.inflight.requests > 0:
                    ep.inflight.requests -= 1
                for hook in self._hooks:
                    hook.on_stage_done(held.request, ep, now)
                return

    def on_finished(self, request_id: str, now: float) -> None:
        """The response ended (successfully or not, after streaming started)."""
        held = self._active.pop(request_id, None)
        if held is None:
            return
        _release(held.serving)
        if held.stages:
            _release(held.stages)
        for hook in self._hooks:
            hook.on_finished(held.request, now)

    def sweep(self, now: float, older_than_s: float) -> int:
        """Release requests started more than ``older_than_s`` ago that were never finished (a
        lost callback must not hold load forever; llm-d has a janitor for the same). Returns how
        many were released."""
        stale = [rid for rid, held in self._active.items() if now - held.started > older_than_s]
        for rid in stale:
            self.on_finished(rid, now)
        return len(stale)

    def __len__(self) -> int:
        return len(self._active)


class _Held:
    """A started request: the pods it holds, the serving one(s) until it ends, the stage pods
    (encode, prefill) until its first token."""

    __slots__ = ("request", "serving", "stages", "started")

    def __init__(self, request: SchedulingRequest, started: float) -> None:
        self.request = request
        self.started = started
        self.serving: list[EndpointState] = []
        self.stages: list[EndpointState] = []


def _release(held: list[EndpointState]) -> None:
    for ep in held:
        if ep.inflight.requests > 0:
            ep.inflight.requests -= 1
    held.clear()
