"""The seam between the request controller and whatever picks endpoints.

The controller needs five things from an endpoint picker: a decision for a request over the
current candidates, the lifecycle calls that keep in-flight load right (on every stage's pod),
the ordered fallbacks of a decision, and a way to forget a removed endpoint.
:class:`EndpointPicker` names them; :class:`mmgate.control.scheduler_picker.SchedulerPicker`
implements it over :class:`mmgate.scheduling.Scheduler`, tests may implement it with a few lines.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

import msgspec

from mmgate.datalayer.endpoints import EndpointRecord
from mmgate.request.view import RequestView


class Decision(msgspec.Struct):
    """Where one attempt of a request goes, and what the gateway reports about it.

    ``handle`` is opaque to the controller and handed back in the lifecycle calls. ``headers``
    are the routing headers the picker's PreRequest hooks want set upstream (e.g.
    ``x-prefiller-host-port``). ``pre_request`` is the hook work that may run after the request
    was sent (index updates). ``encoder_items``/``encoder_hits`` are per modality, for the chosen
    endpoint: the media items queried and those the picker believed that endpoint had encoded.
    ``prefix_match`` is the fraction of the prompt's blocks believed cached there (``None`` when
    not computed). ``eligible`` is how many candidates could serve the request, the chosen one
    included: those that passed the serving stage's filters (in E/PD the encode pods are
    candidates the decode filter drops, so they are no retry target); ``None`` when the picker
    does not say, and every candidate counts. ``profile`` names the scheduling profile whose pick
    this is ("" when the picker has no profiles). ``predicted_ttft_s`` is the picker's predicted
    time to first token there (``predicted-ttft-producer``; ``None`` when nothing predicts it),
    which the controller reports beside the TTFT it observes. ``encode`` is where the request's
    media are encoded and why (``adaptive-encode-decider``: ``("tier", "cheaper-tier")``, ``("local",
    "cached-local")``...; ``None`` when no such decider was asked), ``encode_costs`` the costs it
    compared, in seconds: ``(local, tier)`` (``tier`` infinite when there was no tier to ask).
    ``picked`` is how many
    endpoints the picker chose (its ``maxNumOfEndpoints``, llm-d's parameter; ``endpoint`` first):
    what a transport that hands a list on (Envoy's destination header) sends by default.

    A msgspec struct, as one is made on every attempt: its fields are filled in C (each empty
    dict default a fresh one) rather than by a generated Python ``__init__``.
    """

    endpoint: str
    request_tokens: int = 0
    tokens_by_modality: dict[str, int] = {}
    scores: dict[str, dict[str, float]] | None = None
    headers: dict[str, str] = {}
    encoder_items: dict[str, int] = {}
    encoder_hits: dict[str, int] = {}
    prefix_match: float | None = None
    eligible: int | None = None
    profile: str = ""
    predicted_ttft_s: float | None = None
    encode: tuple[str, str] | None = None
    encode_costs: tuple[float, float] | None = None
    picked: int = 1
    pre_request: Callable[[], None] | None = None
    handle: object = None


class NoEndpoint(Exception):
    """No candidate survived the filters (distinct from 'no endpoints at all')."""


class EndpointPicker(Protocol):
    def decide(
        self,
        view: RequestView,
        candidates: Sequence[EndpointRecord],
        now: float,
        *,
        request_id: str,
        headers: Mapping[str, str],
        debug: bool,
        tenant: str | None = None,
    ) -> Decision:
        """Pick an endpoint among ``candidates`` (non-empty). Raises :class:`NoEndpoint`.
        ``tenant``: the verified API key's tenant (authentication on), for per-tenant policy.

        Called again with the remaining candidates when an attempt fails before the first byte,
        so the retry goes to the next best endpoint under the state of that moment.
        """
        ...

    def fallbacks(self, decision: Decision) -> list[str]:
        """The other candidates in the order the picker would try them (best first)."""
        ...

    def started(self, decision: Decision) -> None:
        """The request was sent (in-flight load goes up on every pod that works for it)."""
        ...

    def first_token(self, decision: Decision) -> None:
        """The first response bytes arrived (prefill is over)."""
        ...

    def stage_done(self, decision: Decision, endpoint: str) -> None:
        """Every encode or prefill leg the transport sent to ``endpoint`` for this decision has
        ended (in-flight load goes down there, before the first token)."""
        ...

    def finished(self, decision: Decision, *, ok: bool) -> None:
        """The attempt ended, successfully or not (in-flight load goes down)."""
        ...

    def forget(self, endpoint: str) -> None:
        """``endpoint`` left the fleet: every per-endpoint index must drop it."""
        ...
