"""``adaptive-encode-decider``: per request with media, encode on the serving pod, on the encode
tier, or split the items between them: on the tier while the request's TTFT SLO allows, else
whichever the predicted cost says is cheaper.

A drop-in for ``always-disagg-multimodal-decider`` in the ``disagg-profile-handler``'s
``deciders.encode`` (llm-d's decider interface: asked after the decode profile chose the PD pod).
Static policies bet on the workload: llm-d's decider sends every request with media to the encode
tier, so an image-light request pays the hop while the PD pod's encoder idles, and a fleet without
a tier queues heavy requests' encoding in front of everyone's prefill and decode. This decider
prices both, per request, from what the gateway knows at that moment.

For the chosen PD pod ``d`` and the encode pods ``E`` (role ``encode``), every distinct media item
``i`` of ``T_i`` tokens costs ``c_x(i) = itemSeconds_x + T_i * encoderSecondsPerToken_x`` encoder
seconds on pod ``x`` (each pod's own rate: ``byEndpoint``, ``byLabel``, ``byRole``, else the
default, so a tier of a cheaper card is priced as it is). An item ``d``'s encoder cache or cached
prefix holds costs nothing locally; an item an encode pod holds costs nothing there but the
transfer.

With a TTFT SLO (``ttftSLOSeconds``, or the request's ``x-slo-ttft-ms``: llm-d's
predicted-latency header) the tier is used while the request still meets it. The tier's
encoders serve nobody else; ``d``'s GPU runs its encoder inside the engine step, so a local
encode stalls every decode running there, and TPOT is the SLO a PD pod breaks first in every
fleet measured (docs/benchmarks/disaggregation.md). The plans are tried in order of the encoder
seconds they put on ``d`` (every cold item on the tier, cold items moved to ``d`` one at a time,
every item on ``d``) and the first with::

    P_d + max_e (B_e + sum_{i on e} c_e(i)) + legSeconds
        + transferSecondsPerToken * sum_{i on tier} T_i + sum_{i on d} c_d(i)  <=  SLO

is taken (``slo-tier``, ``slo-split``, ``slo-local``); ``P_d`` is the request's own prefill on
``d`` (``predicted-ttft-producer``'s work term, media at their transfer; else the prompt at
``prefillTokensPerSecond``). ``d``'s queue before prefill is left out: every plan pays it, and
the gateway's count of it includes requests still in their encode legs. When no plan meets the
SLO, or with none, the priced costs decide::

    local  = sum_i c_d(i) * (1 + w * N_d)
    tier   = max_e (B_e + sum_{i on e} c_e(i)) + legSeconds + transferSecondsPerToken * sum_i T_i
             + sum_e sum_{i on e} c_e(i) * w * N_e

The first term of each is this request's own time to first token (the PD pod's queue before
prefill is paid either way, so it cancels); the second is the delay its encoder work adds to the
requests sharing that GPU (``N``: the requests on the pod, the gateway's in-flight count or the
scraped waiting + running when larger; a vLLM pod runs its encoder inside the engine step, so a
local encode stalls every running sequence; ``w``: ``sharedWeight``). ``B_e`` is the encoder work
this decider placed on ``e`` and not yet seen end (or the scraped queue times the mean item, when
larger). Per item the tier placement stays cache-affine: an item an encode pod holds goes there,
a cold one to the encoder where it would finish first (ties by rendezvous hash, as
:func:`mmgate.disagg.plan.assign_encoders`). With ``split`` (default) items ``d`` holds stay local,
and cold items move to local one by one, the costliest there first, while that lowers the cost.
A decision tries at most items + 2 plans, each O(items x encode pods).

With a TPOT SLO on the requests decoding on ``d`` (``tpotSLOSeconds``, or each one's
``x-slo-tpot-ms``) the decider also sees what a local encode does to them: each second of it is
a second added to one inter-token gap of every request decoding there (:meth:`decode_slack` predicts,
per decode, the stall it can still absorb within its TPOT, from the prefills and local encodes
booked on ``d`` since its first token and ``decodeStepSeconds``). A plan whose encoder seconds
on ``d`` exceed what any decode there can absorb is not taken: the decider takes the plan with
the most seconds on ``d`` that none of them refuses, every cold item on the tier at least
(``tpot-tier``, ``tpot-split``). O(decodes on ``d``) more a decision.

The choice (``tier``, ``local``, ``split``) and its reason are left in the request
(``ENCODE_CHOICE``): ``encoder-header-handler`` follows its plan (an item encoded locally is named
``local`` in ``x-encoder-hosts-ports``, which mmgate's orchestration sends nowhere), and the
gateway reports it (access log, ``x-mmgate-encode`` in debug mode, ``mmgate_encode_decisions_total``).
Text never reaches the tier. Nothing here does I/O.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from mmgate.request.view import Modality
from mmgate.scheduling.contracts import EndpointAware, PluginHandle, Producer
from mmgate.scheduling.encoder_assignment import LOCAL, rendezvous
from mmgate.scheduling.keys import (
    DECODE_OUTLOOK,
    ENCODE_CHOICE,
    ENCODE_TIER,
    ENCODER_CACHE_MATCH,
    PREDICTED_TTFT,
    PREFIX_MATCH,
    TOKENIZED_PROMPT,
    EncodeChoice,
)
from mmgate.scheduling.lifecycle import RequestLifecycle
from mmgate.scheduling.plugins._deciding import Decider
from mmgate.scheduling.plugins._schemas import AdaptiveEncodeParams, EncoderRate
from mmgate.scheduling.plugins.encode_filter import EncodeFilter
from mmgate.scheduling.plugins.predicted_ttft_slo_filter import request_slo_seconds
from mmgate.scheduling.tiers import PodLoad, TierDemand, TierSizer, tier_demand
from mmgate.scheduling.types import DataKey, EndpointState, SchedulingRequest

ENCODE_PROFILE = "encode"
_MAX_SHARE = 0.9  # the stall share carried forward is capped: a pod all stall would predict forever
_SERVING: DataKey[str] = DataKey("adaptive-encode-decider.serving")
"""The PD pod the decision was made for: its start there is the request's serving start."""


class _Item:
    """One distinct media item of the request: its tokens, its end position (its last position
    + 1: a cached prefix reaching it holds it) and the endpoints believed to hold it. A plain
    class: compiled, its fields are C members."""

    __slots__ = ("end", "holders", "identity", "tokens")

    def __init__(self, identity: str, tokens: int, end: int, holders: frozenset[str]) -> None:
        self.identity = identity
        self.tokens = tokens
        self.end = end
        self.holders = holders


class _Placed:
    """Encoder seconds this decider placed on a pod for one request, until they end."""

    __slots__ = ("endpoint", "items", "seconds", "tier")

    def __init__(self, endpoint: str, seconds: float, items: int, tier: bool) -> None:
        self.endpoint = endpoint
        self.seconds = seconds
        self.items = items
        self.tier = tier


class _Serving:
    """A request on its PD pod: the stall its prefill and local encodes put on that pod's decodes,
    the tokens it will decode, its TPOT SLO (0: none), and when its first token came (-1: not
    yet) with the pod's stall count then."""

    __slots__ = ("first", "mark", "pod", "slo", "stall", "tokens")

    def __init__(self, pod: str, stall: float, tokens: int, slo: float) -> None:
        self.pod = pod
        self.stall = stall
        self.tokens = tokens
        self.slo = slo
        self.first = -1.0
        self.mark = 0.0


class _Pod:
    """A PD pod's stall seconds (prefill and local encode: engine-step time beyond a decode step)
    booked as their requests' first tokens came, those started and not yet booked, and the
    requests decoding there."""

    __slots__ = ("decoding", "pending", "stall")

    def __init__(self) -> None:
        self.stall = 0.0
        self.pending = 0.0
        self.decoding: dict[str, _Serving] = {}


class AdaptiveEncodeDecider(
    Decider[AdaptiveEncodeParams], Producer[AdaptiveEncodeParams], RequestLifecycle, EndpointAware, TierSizer
):
    type_name = "adaptive-encode-decider"

    def __init__(self, name: str, params: AdaptiveEncodeParams, handle: PluginHandle) -> None:
        super().__init__(name, params, handle)
        for field_name in (
            "encoderSecondsPerToken",
            "itemSeconds",
            "transferSecondsPerToken",
            "legSeconds",
            "sharedWeight",
            "ttftSLOSeconds",
            "tpotSLOSeconds",
        ):
            if not getattr(params, field_name) >= 0:
                raise ValueError(f"{field_name} must be >= 0, got {getattr(params, field_name)}")
        self._by_label: list[tuple[str, str, EncoderRate]] = []
        for selector, rate in params.byLabel.items():
            key, sep, value = selector.partition("=")
            if not sep or not key:
                raise ValueError(f"byLabel key {selector!r} must be 'label=value'")
            self._by_label.append((key, value, rate))
        for where, table in (("byEndpoint", params.byEndpoint), ("byRole", params.byRole)):
            for key, rate in table.items():
                _check(rate, f"{where}.{key}")
        for _, _, rate in self._by_label:
            _check(rate, "byLabel")
        sizing = params.sizing
        targets = [
            sizing.targetSeconds,
            sizing.decodeRequests,
            params.prefillTokensPerSecond,
            *sizing.byRole.values(),
        ]
        if not all(v > 0 for v in targets):
            raise ValueError("prefillTokensPerSecond and the sizing targets must be > 0")
        if not params.decodeStepSeconds > 0 or params.outputTokens < 2:
            raise ValueError("decodeStepSeconds must be > 0 and outputTokens >= 2")
        self._fleet: Sequence[EndpointState] = ()  # the candidates of the last decision
        self._encoder_key = ENCODER_CACHE_MATCH.scoped(params.encoderCacheProducerName or None)
        self._prefix_key = PREFIX_MATCH.scoped(params.prefixMatchInfoProducerName or None)
        self._ttft_key = PREDICTED_TTFT.scoped(params.predictedTTFTProducerName or None)
        self._slo_header = params.sloHeader.lower()
        self._tpot_header = params.tpotSLOHeader.lower()
        self._serving: dict[str, _Serving] = {}  # per request id, from its start on its PD pod
        self._pods: dict[str, _Pod] = {}  # per PD pod
        self._placed: dict[str, list[_Placed]] = {}  # per request id
        self._backlog: dict[str, float] = {}  # per endpoint: placed encoder seconds not yet ended
        self._queued: dict[str, int] = {}  # per endpoint: placed items not yet ended
        self._mean_item_s = 0.0
        self._mean_weight = 0.0

    # -- plugin wiring ----------------------------------------------------------------------------

    def produces(self) -> tuple[DataKey[Any], ...]:
        return (ENCODE_TIER, DECODE_OUTLOOK)

    def consumes(self) -> tuple[DataKey[Any], ...]:
        return (TOKENIZED_PROMPT, self._encoder_key)

    def consumes_optional(self) -> tuple[DataKey[Any], ...]:
        return (self._prefix_key, self._ttft_key)

    def produce(self, request: SchedulingRequest, endpoints: Sequence[EndpointState]) -> None:
        roles = EncodeFilter.roles
        self._fleet = endpoints
        request.put(ENCODE_TIER, [ep for ep in endpoints if ep.effective_role in roles])
        request.put(DECODE_OUTLOOK, self)

    # -- rates ------------------------------------------------------------------------------------

    def rate(self, endpoint: EndpointState) -> tuple[float, float]:
        """``(seconds per token, seconds per item)`` of the pod's encoder."""
        p = self.params
        specs = self._specs(endpoint)
        per_token = next(
            (s.encoderSecondsPerToken for s in specs if s.encoderSecondsPerToken is not None), None
        )
        per_item = next((s.itemSeconds for s in specs if s.itemSeconds is not None), None)
        return (
            p.encoderSecondsPerToken if per_token is None else per_token,
            p.itemSeconds if per_item is None else per_item,
        )

    def prefill_s_per_token(self, endpoint: EndpointState) -> float:
        p = self.params
        rate = next(
            (s.prefillTokensPerSecond for s in self._specs(endpoint) if s.prefillTokensPerSecond), None
        )
        return 1.0 / (p.prefillTokensPerSecond if rate is None else rate)

    def decode_step_s(self, endpoint: EndpointState) -> float:
        """The pod's engine step with decodes only (no prefill, no encode)."""
        step = next((s.decodeStepSeconds for s in self._specs(endpoint) if s.decodeStepSeconds), None)
        return self.params.decodeStepSeconds if step is None else step

    def tier_demand(self) -> list[TierDemand]:
        """Per role, the work this gateway holds on its pods (:mod:`mmgate.scheduling.tiers`):
        the encoder seconds this decider placed (tier and local) and the prompt tokens in flight
        still to prefill (an encode pod prefills nothing)."""
        sizing = self.params.sizing
        pods = []
        for ep in self._fleet:
            role = ep.effective_role or "aggregated"
            tokens = 0 if role == "encode" else ep.inflight.tokens
            pods.append(
                PodLoad(
                    role,
                    self._backlog.get(ep.name, 0.0),
                    tokens,
                    ep.inflight.requests,
                    self.prefill_s_per_token(ep),
                )
            )
        return tier_demand(
            pods, lambda role: sizing.byRole.get(role, sizing.targetSeconds), sizing.decodeRequests
        )

    def _specs(self, endpoint: EndpointState) -> list[EncoderRate]:
        """The rates configured for the pod, most specific first (endpoint, labels, role)."""
        p = self.params
        specs: list[EncoderRate] = []
        own = p.byEndpoint.get(endpoint.name)
        if own is not None:
            specs.append(own)
        for key, value, rate in self._by_label:
            if endpoint.labels.get(key) == value:
                specs.append(rate)
        role = endpoint.effective_role
        if role is not None and role in p.byRole:
            specs.append(p.byRole[role])
        return specs

    def backlog(self, name: str) -> float:
        """Encoder seconds placed on ``name`` by this decider and not yet ended."""
        return self._backlog.get(name, 0.0)

    def _sharing(self, request: SchedulingRequest, ep: EndpointState, placed: int) -> int:
        """Requests (or encode legs) on the pod that its encoder work would delay."""
        m = request.fresh_metrics(ep)
        scraped = 0 if m is None else (m.waiting or 0) + (m.running or 0)
        return max(ep.inflight.requests, placed, int(scraped))

    # -- the decision -----------------------------------------------------------------------------

    def disaggregate(self, request: SchedulingRequest, decode_target: EndpointState) -> bool:
        request.put(_SERVING, decode_target.name)
        items = self._items(request)
        if not items:
            return False  # text (or only precomputed embeddings): the tier is never asked
        choice = self.choose(request, decode_target, items)
        request.put(ENCODE_CHOICE, choice)
        return choice.outcome != "local"

    def _items(self, request: SchedulingRequest) -> list[_Item]:
        tp = request.get(TOKENIZED_PROMPT)
        if tp is None or not tp.media:
            return []
        ends: dict[str, tuple[int, int]] = {}
        for m in tp.media:
            if m.modality == Modality.EMBEDS or m.identity in ends:
                continue
            ends[m.identity] = (m.length, m.offset + m.length)
        match = request.get(self._encoder_key)
        if match is None:
            return [_Item(i, t, e, frozenset()) for i, (t, e) in ends.items()]
        out = []
        for identity, held in zip(match.identities, match.holders, strict=True):
            found = ends.get(identity)
            if found is not None:
                out.append(_Item(identity, found[0], found[1], held))
        return out

    def choose(self, request: SchedulingRequest, pd: EndpointState, items: Sequence[_Item]) -> EncodeChoice:
        """Price the three ways and keep the cheapest (ties: local, no hop). The static policies
        (``tier``: every request with media offloaded, llm-d's decider; ``local``: none) take
        the same plan and report the same costs, so a comparison isolates the decision."""
        p = self.params
        w = p.sharedWeight
        prefix = request.get(self._prefix_key)
        cached = 0 if prefix is None else prefix.matched_tokens(pd.name)
        spt, per_item = self.rate(pd)
        local_s = [
            0.0 if (pd.name in it.holders or cached >= it.end) else per_item + it.tokens * spt for it in items
        ]
        n_pd = self._sharing(request, pd, 0)
        local_cost = sum(local_s) * (1.0 + w * n_pd)
        tier = [ep for ep in request.get(ENCODE_TIER) or () if ep.name != pd.name]
        if not tier:
            return EncodeChoice("local", "no-encoder", {}, local_cost, math.inf, {pd.name: sum(local_s)})
        if not any(local_s) and p.policy != "tier":
            return EncodeChoice("local", "cached-local", {}, 0.0, math.inf)
        secs: dict[str, list[float]] = {}  # each item's encoder seconds on each encode pod
        for ep in tier:
            per_token, each = self.rate(ep)
            secs[ep.name] = [each + it.tokens * per_token for it in items]
        sharing = {ep.name: self._sharing(request, ep, self._queued.get(ep.name, 0)) for ep in tier}
        backlog = {ep.name: self._tier_backlog(request, ep, secs[ep.name]) for ep in tier}
        keep_local = [
            p.split and p.policy == "adaptive" and s == 0.0 for s in local_s
        ]  # held by the PD pod: free there
        plan = _replan(items, [LOCAL if k else "" for k in keep_local], secs, backlog)
        cost = self._cost(items, plan, local_s, secs, backlog, sharing, n_pd)
        adaptive = p.policy == "adaptive"
        slo = request_slo_seconds(request, self._slo_header, p.ttftSLOSeconds) if adaptive else 0.0
        # what each decode running on the PD pod can still absorb within its TPOT SLO
        slack = _Slack(self, pd, request.now)
        plans = self._plans(items, plan, local_s, secs, backlog) if adaptive else [plan]
        if slo > 0:
            # The tier's encoders serve nobody else; the PD pod's GPU serves every request on it
            # (its decodes stall for a local encode). Use the tier while the request still meets
            # its TTFT, then as few PD seconds as meet it, unless they would push a decode
            # running there past its TPOT.
            base = self._pd_seconds(request, pd)
            via_tier = base + _ttft(items, plan, local_s, secs, backlog, p)
            via_pd = base + sum(local_s)
            for trial in plans:
                if base + _ttft(items, trial, local_s, secs, backlog, p) <= slo:
                    if slack.refuses(_on_pd(trial, local_s)):
                        return self._spare(items, plans, slack, local_s, secs, pd, via_pd, via_tier)
                    return self._result(items, trial, local_s, secs, pd, via_pd, via_tier, "slo-")
        if p.split and adaptive and len(items) > 1:
            # move cold items to the PD pod while it lowers the priced cost
            for trial in plans[1:-1]:
                c = self._cost(items, trial, local_s, secs, backlog, sharing, n_pd)
                if c < cost:
                    plan, cost = trial, c
        if p.policy == "local" or (adaptive and local_cost <= cost):
            if adaptive and slack.refuses(sum(local_s)):
                return self._spare(items, plans, slack, local_s, secs, pd, local_cost, cost)
            reason = "cheaper-local" if adaptive else "policy"
            return EncodeChoice("local", reason, {}, local_cost, cost, {pd.name: sum(local_s)})
        if adaptive and slack.refuses(_on_pd(plan, local_s)):
            return self._spare(items, plans, slack, local_s, secs, pd, local_cost, cost)
        return self._result(items, plan, local_s, secs, pd, local_cost, cost, "cheaper-" if adaptive else "")

    def _spare(
        self,
        items: Sequence[_Item],
        plans: Sequence[list[str]],
        slack: _Slack,
        local_s: Sequence[float],
        secs: Mapping[str, list[float]],
        pd: EndpointState,
        local_cost: float,
        cost: float,
    ) -> EncodeChoice:
        """The plan the decodes on the PD pod can bear: the most PD encoder seconds that push none
        past its TPOT (the plans grow in them; the first, every cold item on the tier, puts none
        there). Reason ``tpot-<outcome>``."""
        best = plans[0]
        for trial in plans[1:]:
            if slack.refuses(_on_pd(trial, local_s)):
                break
            best = trial
        return self._result(items, best, local_s, secs, pd, local_cost, cost, "tpot-")

    def decode_slack(self, pd: EndpointState, now: float) -> list[float]:
        """For each request decoding on ``pd`` with a TPOT SLO, the stall seconds it can still
        absorb before its TPOT passes the SLO.

        vLLM (and the simulator) run a PD pod's encoder and prefill chunks inside the engine step
        that also decodes every running sequence, so each second of them is a second added to
        one inter-token gap of every request decoding there; a request's TPOT is its decode
        time over its tokens after the first. For a request ``j`` that got its first token
        ``e`` seconds ago and has seen ``a`` seconds of stall booked on the pod since (the
        prefills and local encodes of the requests whose first tokens came there after its
        own), at a pure decode step ``s`` (``decodeStepSeconds``) it has made about ``(e - a) /
        s`` of its ``n`` tokens; its remaining ``r`` take ``r·s`` plus the stall still to come:
        the stall started there and not yet booked, or, when more, the pod's stall share ``ρ``
        (booked stall over elapsed decode time, pooled over its decodes) carried on:
        ``r·s·ρ/(1-ρ)``. Its slack is ``SLO·(n-1)`` minus that predicted decode time."""
        return [sv.slo * (sv.tokens - 1) - t for sv, t in self._decode_seconds(pd, now) if sv.slo > 0]

    def decode_tpot(self, endpoint: EndpointState, now: float) -> float | None:
        """The highest TPOT predicted for a request decoding on ``endpoint`` (its predicted decode
        time, as :meth:`decode_slack`'s, over its tokens after the first), whatever its SLO;
        ``None`` when none decodes there. ``decode-slack-scorer`` reads it through
        ``DECODE_OUTLOOK``: the PD-pod choice then sees the prefill and encode stall booked on
        each pod's decodes, which it is otherwise blind to."""
        worst: float | None = None
        for sv, t in self._decode_seconds(endpoint, now):
            gaps = sv.tokens - 1
            if gaps > 0:
                tpot = t / gaps
                if worst is None or tpot > worst:
                    worst = tpot
        return worst

    def _decode_seconds(self, pd: EndpointState, now: float) -> list[tuple[_Serving, float]]:
        """Each request decoding on ``pd`` with its predicted decode time (:meth:`decode_slack`)."""
        pod = self._pods.get(pd.name)
        if pod is None or not pod.decoding:
            return []
        step = self.decode_step_s(pd)
        elapsed = 0.0
        stalled = 0.0
        for sv in pod.decoding.values():
            e = now - sv.first
            if e > 0:
                elapsed += e
                stalled += min(e, pod.stall - sv.mark)
        share = min(_MAX_SHARE, stalled / elapsed) if elapsed > 0 else 0.0
        grow = share / (1.0 - share)
        out = []
        for sv in pod.decoding.values():
            e = now - sv.first
            if e < 0:
                e = 0.0
            a = min(e, pod.stall - sv.mark)
            gaps = sv.tokens - 1
            ahead = (gaps - min(gaps, (e - a) / step)) * step
            out.append((sv, e + ahead + max(pod.pending, ahead * grow)))
        return out

    def _plans(
        self,
        items: Sequence[_Item],
        plan: list[str],
        local_s: Sequence[float],
        secs: Mapping[str, list[float]],
        backlog: Mapping[str, float],
    ) -> list[list[str]]:
        """From ``plan`` (every cold item to the tier) to every item local, one cold item moved to
        the PD pod at a time, the costliest there first (only with ``split``; a tier pod that
        holds an item keeps it)."""
        out = [plan]
        if self.params.split and len(items) > 1:
            for i in sorted(range(len(items)), key=lambda i: -local_s[i]):
                if out[-1][i] == LOCAL or not items[i].holders.isdisjoint(secs):
                    continue
                trial = list(out[-1])
                trial[i] = LOCAL
                if all(e == LOCAL for e in trial):
                    break
                out.append(_replan(items, trial, secs, backlog))
        out.append([LOCAL] * len(items))
        return out

    def _pd_seconds(self, request: SchedulingRequest, pd: EndpointState) -> float:
        """The PD pod's predicted TTFT for the request with its media arriving encoded
        (``predicted-ttft-producer``, which prices media at their transfer), else its prompt's
        prefill at the pod's rate."""
        predicted = request.get(self._ttft_key)
        if predicted is not None:
            row = predicted.candidate(pd.name)
            if row is not None:
                return row[4]
        tp = request.get(TOKENIZED_PROMPT)
        return 0.0 if tp is None else tp.total_tokens * self.prefill_s_per_token(pd)

    def _result(
        self,
        items: Sequence[_Item],
        plan: Sequence[str],
        local_s: Sequence[float],
        secs: Mapping[str, list[float]],
        pd: EndpointState,
        local_cost: float,
        cost: float,
        why: str,
    ) -> EncodeChoice:
        """The choice a plan makes; ``why`` prefixes its reason (empty: a static policy)."""
        if all(e == LOCAL for e in plan):
            return EncodeChoice("local", why + "local", {}, local_cost, cost, {pd.name: sum(local_s)})
        by_id = {it.identity: e for it, e in zip(items, plan, strict=True)}
        outcome = "tier" if LOCAL not in plan else "split"
        reason = why + outcome if why else "policy"
        if outcome == "split" and all(plan[i] != LOCAL or local_s[i] == 0.0 for i in range(len(plan))):
            reason = "cached-split"
        return EncodeChoice(
            outcome, reason, by_id, local_cost, cost, _seconds_on(items, plan, secs, local_s, pd.name)
        )

    def _tier_backlog(self, request: SchedulingRequest, ep: EndpointState, item_s: Sequence[float]) -> float:
        """The encoder seconds queued on a tier pod: what this decider placed there and has not
        seen end, or its scraped queue times the mean item placed so far (this request's mean
        item there before any was placed: another gateway's legs count too), when larger."""
        own = self._backlog.get(ep.name, 0.0)
        m = request.fresh_metrics(ep)
        if m is not None and m.waiting:
            mean = self._mean_item_s / self._mean_weight if self._mean_weight else sum(item_s) / len(item_s)
            scraped = m.waiting * mean
            if scraped > own:
                return scraped
        return own

    def _cost(
        self,
        items: Sequence[_Item],
        plan: Sequence[str],
        local_s: Sequence[float],
        secs: Mapping[str, list[float]],
        backlog: Mapping[str, float],
        sharing: Mapping[str, int],
        n_pd: int,
    ) -> float:
        w = self.params.sharedWeight
        work, _, local = _legs(items, plan, local_s, secs)
        shared = sum(s * w * sharing[e] for e, s in work.items())
        return _ttft(items, plan, local_s, secs, backlog, self.params) + shared + local * w * n_pd

    # -- what the decisions placed, until it ends -------------------------------------------------

    def on_started(
        self, request: SchedulingRequest, endpoint: EndpointState, profile: str, now: float
    ) -> None:
        tier = profile == ENCODE_PROFILE or endpoint.effective_role in EncodeFilter.roles
        if not tier and request.get(_SERVING) == endpoint.name:
            self._serving_started(request, endpoint)
        choice = request.get(ENCODE_CHOICE)
        if choice is None:
            return
        seconds = choice.seconds.get(endpoint.name)
        if not seconds:
            return
        items = sum(1 for e in choice.plan.values() if e == endpoint.name) if tier else 0
        self._placed.setdefault(request.request_id, []).append(_Placed(endpoint.name, seconds, items, tier))
        self._backlog[endpoint.name] = self._backlog.get(endpoint.name, 0.0) + seconds
        self._queued[endpoint.name] = self._queued.get(endpoint.name, 0) + items
        if tier and items:
            self._mean_item_s = self._mean_item_s * 0.99 + seconds / items
            self._mean_weight = self._mean_weight * 0.99 + 1.0

    def _serving_started(self, request: SchedulingRequest, endpoint: EndpointState) -> None:
        """The request reached its PD pod: the stall its prefill (none on a decode-only pod) and
        its local encodes will put on the decodes there is pending until its first token."""
        p = self.params
        tpot = request_slo_seconds(request, self._tpot_header, p.tpotSLOSeconds)
        old = self._serving.pop(request.request_id, None)
        if old is not None:
            self._drop(request.request_id, old)
        choice = request.get(ENCODE_CHOICE)
        stall = 0.0 if choice is None else choice.seconds.get(endpoint.name, 0.0)
        if endpoint.effective_role != "decode":
            stall += self._pd_seconds(request, endpoint)
        tokens = request.view.max_tokens
        sv = _Serving(endpoint.name, stall, tokens if tokens and tokens > 1 else p.outputTokens, tpot)
        self._serving[request.request_id] = sv
        pod = self._pods.get(endpoint.name)
        if pod is None:
            pod = self._pods[endpoint.name] = _Pod()
        pod.pending += stall

    def _drop(self, request_id: str, sv: _Serving) -> None:
        pod = self._pods.get(sv.pod)
        if pod is None:
            return
        if sv.first < 0:
            left = pod.pending - sv.stall
            pod.pending = left if left > 1e-12 else 0.0
        else:
            pod.decoding.pop(request_id, None)

    def on_stage_done(self, request: SchedulingRequest, endpoint: EndpointState, now: float) -> None:
        placed = self._placed.get(request.request_id)
        if placed:
            for pl in [pl for pl in placed if pl.endpoint == endpoint.name]:
                self._release(pl)
                placed.remove(pl)

    def on_first_token(self, request: SchedulingRequest, now: float) -> None:
        for pl in self._placed.pop(request.request_id, ()):
            self._release(pl)
        sv = self._serving.get(request.request_id)
        pod = None if sv is None else self._pods.get(sv.pod)
        if sv is None or pod is None or sv.first >= 0:
            return
        # its prefill and local encodes ran in the steps before its first token: every request
        # decoding there then waited for them
        left = pod.pending - sv.stall
        pod.pending = left if left > 1e-12 else 0.0
        pod.stall += sv.stall
        sv.first = now
        sv.mark = pod.stall
        pod.decoding[request.request_id] = sv

    def on_finished(self, request: SchedulingRequest, now: float) -> None:
        for pl in self._placed.pop(request.request_id, ()):
            self._release(pl)
        sv = self._serving.pop(request.request_id, None)
        if sv is not None:
            self._drop(request.request_id, sv)

    def _release(self, pl: _Placed) -> None:
        left = self._backlog.get(pl.endpoint, 0.0) - pl.seconds
        self._backlog[pl.endpoint] = left if left > 1e-12 else 0.0
        self._queued[pl.endpoint] = max(0, self._queued.get(pl.endpoint, 0) - pl.items)

    def remove_endpoint(self, name: str) -> None:
        self._pods.pop(name, None)
        self._backlog.pop(name, None)
        self._queued.pop(name, None)
        self._fleet = [ep for ep in self._fleet if ep.name != name]


def _on_pd(plan: Sequence[str], local_s: Sequence[float]) -> float:
    """The encoder seconds a plan puts on the PD pod."""
    return sum(s for s, e in zip(local_s, plan, strict=True) if e == LOCAL)


class _Slack:
    """The slack of the decodes on the PD pod (:meth:`AdaptiveEncodeDecider.decode_slack`), worked
    out the first time a plan puts encoder seconds there (most decisions put none)."""

    __slots__ = ("decider", "now", "pd", "values")

    def __init__(self, decider: AdaptiveEncodeDecider, pd: EndpointState, now: float) -> None:
        self.decider = decider
        self.pd = pd
        self.now = now
        self.values: list[float] | None = None

    def refuses(self, seconds: float) -> bool:
        """Whether ``seconds`` more stall on the pod would leave a decode there past its TPOT
        SLO. A decode already on course past it refuses too: the pod is decode-bound, and a
        local encode would deepen the miss of every decode there (measured against refusing
        only for decodes still within the SLO, and against needing two:
        docs/benchmarks/disaggregation.md)."""
        if seconds <= 0:
            return False
        if self.values is None:
            self.values = self.decider.decode_slack(self.pd, self.now)
        return any(x < seconds for x in self.values)


def _ttft(
    items: Sequence[_Item],
    plan: Sequence[str],
    local_s: Sequence[float],
    secs: Mapping[str, list[float]],
    backlog: Mapping[str, float],
    p: AdaptiveEncodeParams,
) -> float:
    """The time the plan adds before the PD pod's prefill can end: the tier legs run first (the
    last item sent to the tier ends after its pod's backlog and this request's items there),
    then the PD pod encodes its own items as its prefill reaches them."""
    work, moved, local = _legs(items, plan, local_s, secs)
    if not moved:
        return local
    done = max((backlog[e] + s for e, s in work.items()), default=0.0)
    return done + p.legSeconds + p.transferSecondsPerToken * moved + local


def _legs(
    items: Sequence[_Item], plan: Sequence[str], local_s: Sequence[float], secs: Mapping[str, list[float]]
) -> tuple[dict[str, float], int, float]:
    """What a plan puts where: the encoder seconds on each tier pod (an item the pod holds costs
    none), the tokens sent to the tier, and the PD pod's own encoder seconds."""
    work: dict[str, float] = {}
    moved = 0
    local = 0.0
    for i, (it, e) in enumerate(zip(items, plan, strict=True)):
        if e == LOCAL:
            local += local_s[i]
            continue
        moved += it.tokens
        if e not in it.holders:
            work[e] = work.get(e, 0.0) + secs[e][i]
    return work, moved, local


def _replan(
    items: Sequence[_Item], plan: list[str], secs: Mapping[str, list[float]], backlog: Mapping[str, float]
) -> list[str]:
    """Every item not kept local to an encode pod: a holder (the least loaded), else the pod where
    it finishes first counting the items of this request placed before it; exact ties by the
    rendezvous hash of (item, pod), as :func:`assign_encoders` breaks them."""
    finish = dict(backlog)
    out = []
    for i, (it, kept) in enumerate(zip(items, plan, strict=True)):
        if kept == LOCAL:
            out.append(LOCAL)
            continue
        if it.holders:
            held = [e for e in it.holders if e in finish]
            if held:
                out.append(held[0] if len(held) == 1 else _least(held, finish, it.identity, None, i))
                continue
        best = _least(secs, finish, it.identity, secs, i)
        finish[best] += secs[best][i]
        out.append(best)
    return out


def _least(
    pods: Iterable[str],
    finish: Mapping[str, float],
    identity: str,
    secs: Mapping[str, list[float]] | None,
    i: int,
) -> str:
    """The pod of ``pods`` where item ``i`` ends first (its own seconds counted when ``secs``)."""
    least = math.inf
    tied: list[str] = []
    for e in pods:
        v = finish[e] + secs[e][i] if secs is not None else finish[e]
        if v < least:
            least, tied = v, [e]
        elif v == least:
            tied.append(e)
    return tied[0] if len(tied) == 1 else max(tied, key=lambda e: rendezvous(identity, e))


def _seconds_on(
    items: Sequence[_Item],
    plan: Sequence[str],
    secs: Mapping[str, list[float]],
    local_s: Sequence[float],
    pd: str,
) -> dict[str, float]:
    """The encoder seconds the plan puts on each pod (the PD pod's local ones included)."""
    out: dict[str, float] = {}
    for i, (it, e) in enumerate(zip(items, plan, strict=True)):
        if e == LOCAL:
            if local_s[i]:
                out[pd] = out.get(pd, 0.0) + local_s[i]
        elif e not in it.holders:
            out[e] = out.get(e, 0.0) + secs[e][i]
    return out


def _check(rate: EncoderRate, where: str) -> None:
    for field_name in ("encoderSecondsPerToken", "itemSeconds"):
        v = getattr(rate, field_name)
        if v is not None and not v >= 0:
            raise ValueError(f"{where}.{field_name} must be >= 0, got {v}")
    if rate.prefillTokensPerSecond is not None and not rate.prefillTokensPerSecond > 0:
        raise ValueError(f"{where}.prefillTokensPerSecond must be > 0, got {rate.prefillTokensPerSecond}")
