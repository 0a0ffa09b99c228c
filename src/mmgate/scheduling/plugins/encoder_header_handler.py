"""``encoder-header-handler``: tell the decode pod's sidecar which pods encode the media.

The encode-stage counterpart of llm-d's ``prefill-header-handler`` (llm-d sets this header in its
profile handler): when the ``encode`` profile ran, the upstream request carries
``x-encoder-hosts-ports``. Created by default for a config with an encode profile.

With ``perItem`` (the default, mmgate's), the header names one encoder per distinct media item, in
prompt order: each item's encoder is one believed to hold it in its encoder cache, a cold item the
least loaded encode pod among the profile's candidates (queue depth plus in-flight requests plus the
items this request already gave it; stable tie-break): :mod:`mmgate.scheduling.encoder_assignment`.
llm-d's sidecar sends item ``i`` to entry ``i % n``, so it follows the plan as mmgate's does. The
plan is left in the request (``ENCODER_PLAN``) so ``mm-embeddings-cache-producer`` records each item
on its own encoder, and the encoders it uses become the encode profile's targets, so that
:meth:`Scheduler.start` charges each of them with the request at once (a second encoder would
otherwise carry no load until its scraped queue showed the items, and the next request's cold items
would pile onto it). When ``adaptive-encode-decider`` planned the items (``ENCODE_CHOICE``), that
plan is the header, an item the serving pod encodes itself named ``local``.
``perItem: false`` lists the profile's targets, as llm-d does.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import ClassVar

import msgspec

from mmgate.scheduling.encoder_assignment import LOCAL, assign_encoders
from mmgate.scheduling.keys import ENCODE_CHOICE, ENCODER_CACHE_MATCH, ENCODER_PLAN
from mmgate.scheduling.plugins._header_handler import ENCODERS_HEADER, HeaderHandler
from mmgate.scheduling.types import EndpointState, ProfileResult, SchedulingRequest, SchedulingResult


class EncoderHeaderParams(msgspec.Struct, forbid_unknown_fields=True):
    encodeProfile: str = "encode"
    perItem: bool = True


class EncoderHeaderHandler(HeaderHandler[EncoderHeaderParams]):
    type_name = "encoder-header-handler"
    routing_header: ClassVar[str] = ENCODERS_HEADER

    def profile_of(self, params: EncoderHeaderParams) -> str:
        return params.encodeProfile

    def pre_request(self, request: SchedulingRequest, result: SchedulingResult, now: float) -> None:
        ran = result.profiles.get(self.profile)
        match = request.get(ENCODER_CACHE_MATCH)
        if not self.params.perItem or ran is None or not ran.targets or match is None or not match.identities:
            super().pre_request(request, result, now)
            return
        by_name: dict[str, EndpointState] = {ep.name: ep for ep in ran.candidates or ran.targets}
        choice = request.get(ENCODE_CHOICE)
        if (
            choice is not None
            and choice.plan
            and all(e == LOCAL or e in by_name for e in choice.plan.values())
        ):  # the encode decider planned each item (cache-affine, priced per pod): follow it
            self._follow(request, result, ran, match.identities, choice.plan, by_name)
            return
        load: dict[str, float] = {}
        at, stale = request.now, request.staleness_s
        for ep in ran.candidates or ran.targets:
            m = ep.metrics  # SchedulingRequest.fresh_metrics, written out (the header is on the path)
            waiting = 0.0 if m is None or at - m.scraped_at > stale or m.waiting is None else m.waiting
            load[ep.name] = waiting + ep.inflight.requests
        plan = assign_encoders(match.identities, load, holders=match.holders)
        chosen = plan.values()
        request.set_upstream_header(ENCODERS_HEADER, ",".join(chosen))
        request.put(ENCODER_PLAN, plan)
        ran.targets = [by_name[name] for name in dict.fromkeys(chosen)]

    def _follow(
        self,
        request: SchedulingRequest,
        result: SchedulingResult,
        ran: ProfileResult,
        identities: Sequence[str],
        planned: Mapping[str, str],
        by_name: Mapping[str, EndpointState],
    ) -> None:
        """Name each item's planned encoder (``local``: the serving pod encodes it, and the
        encoder-cache index records it there)."""
        chosen = [planned.get(identity, LOCAL) for identity in identities]
        request.set_upstream_header(ENCODERS_HEADER, ",".join(chosen))
        serving = result.target.name
        request.put(
            ENCODER_PLAN, {i: serving if e == LOCAL else e for i, e in zip(identities, chosen, strict=True)}
        )
        ran.targets = [by_name[name] for name in dict.fromkeys(chosen) if name != LOCAL]
