"""``predicted-ttft-producer``: each candidate's predicted time to first token for this request.

For endpoint ``e`` (:mod:`mmgate.scheduling.ttft.rates` has the model and every term)::

    TTFT_e = f_e + p_e * P_e + s_e * (M_e + E_e) + h_e * H_e + c_e * C_e + q_e * A_e

with the request's terms read from the other producers' data: ``P_e`` = priced prompt tokens
(``token-producer``) minus the prefix ``e`` is believed to hold (``PrefixCacheMatchInfo``,
approximate or precise; ``C_e`` is that prefix), ``E_e`` = tokens of the media items after that
prefix which ``e``'s encoder cache is not believed to hold (``EncoderCacheMatchInfo``; ``H_e``
those it is), and the work ahead ``A_e`` / ``M_e`` = the in-flight prompt / media tokens the
gateway has placed on ``e`` and not yet seen a first token for (``inflight-load-producer``),
or, when larger, the scraped waiting queue times the mean prompt size the gateway has placed
(other gateways' traffic shows there).

The API server's front end adds to that (:mod:`mmgate.scheduling.ttft.frontend`): a request with
media waits ``max(load, B_e) + processor``, its own media load and processor seconds priced per
item (``frontEnd``) and ``B_e`` the processor work this gateway placed on ``e`` not yet through;
the fit learns the engine's rates from the observed TTFT minus that part.

An endpoint whose metrics are missing or stale is predicted pessimistically: the worst
prediction among endpoints with fresh metrics plus its own, so a pod the gateway knows nothing
about is never preferred over one it knows (llm-d scores such a pod 0 on its load scorers).

The rates are configured (``prefillTokensPerSecond``, ``encoderSecondsPerToken``,
``fixedSeconds``, per endpoint, label or role) and, with ``learn`` (default), learned online per
endpoint from the TTFTs the gateway observes: the lifecycle hooks time each request from
``on_started`` to ``on_first_token`` and fit that against the terms predicted for the endpoint
it went to (:mod:`mmgate.scheduling.ttft.fit`). Only streamed requests (and APIs that generate
nothing) teach it: a non-streamed answer's first byte comes at its end, not after prefill. When
the gateway runs a disaggregated request's encode and prefill legs itself, the serving pod's time
starts when the last stage pod's legs ended (``on_stage_done``), the moment it is sent the request.

The producers run before the encode decider (``adaptive-encode-decider``) chooses where the media
are encoded, so every candidate is priced with its media at ``encoderSecondsPerToken`` (in an E/PD
config, the encoder outputs' transfer from the encode pods). When the decider then leaves items
on the serving pod (``local``, or the local part of a ``split``), that pod encodes them: once
the deciders have answered (:meth:`PredictedTTFTProducer.stages_planned`), the serving pod's
prediction prices those items at the encoder seconds the decider priced them at instead, and the
fit takes them out of what it learns from (their tokens leave the encoder term, their seconds the
observed TTFT, as the front end's do), so the prediction reported and learned from is of the
placement made.

Beside each prediction it gives the *future cost* of placing the request there (for
``predicted-ttft-scorer``'s ``futureWeight``), in seconds::

    F_e = n * min(M_e, M_H) + r_e * N_e + W_e * x_e * (1 + x_e)

Every placement follows the caches, so the content's ``n`` later requests (believed hits per cold
placement on this fleet, decayed) go to whichever pod holds it with the shortest queue: on a
holder or for content nobody holds they meet ``M_e``, the marginal wait ``Qbar_e * (2 + Qbar_e /
S)`` of one more request on a single-server queue whose mean wait is ``Qbar_e`` (the queue wait
averaged over ``queueAverageSeconds``: what a later request meets) and mean service ``S`` (the mean
GPU work of a placed request); a copy beside the holders (``M_H``: the least of theirs) gives them
the choice, so never more than staying and less when its queue has been shorter. ``N_e``, the new
work the endpoint caches, displaces content worth ``r_e`` a second (what that endpoint's believed
hits would have cost without its caches per second of new work placed there). And the request's
own work ``W_e`` delays the requests that queue behind it: ``x * (1 + x)`` seconds per second of
work in the same queue, ``x = Qbar_e / S``. docs/plugins/predicted-ttft.md derives it.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from typing import Any, Final

from mmgate.request.view import Modality
from mmgate.scheduling.contracts import EndpointAware, PluginHandle, Producer
from mmgate.scheduling.encoder_assignment import LOCAL
from mmgate.scheduling.keys import (
    ENCODE_CHOICE,
    ENCODER_CACHE_MATCH,
    INFLIGHT_LOAD,
    PREDICTED_TTFT,
    PREFIX_MATCH,
    TOKENIZED_PROMPT,
    Candidate,
    EncodeChoice,
    EncoderCacheMatch,
    PredictedTTFT,
    PrefixMatch,
    TokenizedPrompt,
)
from mmgate.scheduling.lifecycle import RequestLifecycle
from mmgate.scheduling.plugins._deciding import StagesPlannedHook
from mmgate.scheduling.plugins._schemas import PredictedTTFTParams
from mmgate.scheduling.ttft import RateLearner, Rates, RateSpec, RateTable, Vector
from mmgate.scheduling.ttft._frontend import NO_FRONTEND, FrontendQueue, frontend_seconds
from mmgate.scheduling.ttft.frontend import FrontendPricer
from mmgate.scheduling.types import DataKey, EndpointState, SchedulingRequest

MEAN_TOKENS_DECAY = 0.99  # the mean prompt size placed, over roughly the last hundred requests
REUSE_DECAY = 0.995  # hits per cold placement, over roughly the last two hundred placements
# ``Final``: compiled, these are C statics rather than reads of the module's globals dict
_NO_END: Final = sys.maxsize  # the smallest media end of a request without media: past any prefix
_NOTHING_HELD: Final[dict[str, list[int]]] = {}
_EMBEDS: Final = Modality.EMBEDS  # an enum member read off its class costs ~0.3 us on CPython 3.11


class _Pending:
    """A placed request until its first token: where it went, when, and the terms predicted there."""

    __slots__ = ("endpoint", "front_end", "front_wait", "learnable", "started", "terms")

    def __init__(self, endpoint: EndpointState, started: float, terms: Vector, learnable: bool) -> None:
        self.endpoint = endpoint
        self.started = started
        self.terms = terms
        self.learnable = learnable
        self.front_end = 0.0  # when its endpoint's processor queue expected it through (0: none)
        self.front_wait = 0.0  # the front-end part of its prediction there


class _Item:
    """One distinct media item that needs the encoder, as the per-candidate loop reads it: its
    end position, tokens, index in the encoder-cache match info (-1 without one) and the
    processor seconds a cache hit on it saves. A class, not a tuple: compiled, its fields are
    read unboxed, where a tuple's are type-checked and unboxed for every candidate."""

    __slots__ = ("end", "index", "length", "skip")

    def __init__(self, end: int, length: int, index: int, skip: float) -> None:
        self.end = end
        self.length = length
        self.index = index
        self.skip = skip


class _Pod:
    """What the decision loop reads and updates of one endpoint, kept together so a candidate
    costs one lookup (each dict read is a C call, and the loop runs for every candidate of every
    decision). ``displaced`` is made when a placement changes ``kept`` / ``placed`` (``on_started``),
    not per decision. ``rates`` is the last :class:`Rates` the loop read for the endpoint and
    ``f`` .. ``q`` its vector, unpacked once per change of rates rather than per decision (the
    rates are frozen and replaced, never changed, when the fit moves them; compiled, the six
    fields are plain C doubles)."""

    __slots__ = ("avg", "c", "displaced", "f", "front", "h", "kept", "p", "placed", "q", "rates", "s")

    def __init__(self) -> None:
        self.avg: float | None = None  # the queue wait, time-averaged (None: never predicted)
        self.front: FrontendQueue | None = None  # its API server's backlog, once work was placed there
        # decayed: the seconds its believed hits saved, and the seconds of new work (content it did
        # not hold) placed on it; their ratio once anything was placed (else None: the fleet's n)
        self.kept = 0.0
        self.placed = 0.0
        self.displaced: float | None = None
        self.rates: Rates | None = None
        self.f = self.p = self.s = self.h = self.c = self.q = 0.0


class PredictedTTFTProducer(
    Producer[PredictedTTFTParams], RequestLifecycle, EndpointAware, StagesPlannedHook
):
    type_name = "predicted-ttft-producer"

    def __init__(self, name: str, params: PredictedTTFTParams, handle: PluginHandle) -> None:
        super().__init__(name, params, handle)
        defaults = RateSpec(params.prefillTokensPerSecond, params.encoderSecondsPerToken, params.fixedSeconds)
        defaults.check("parameters")
        for field, table in (
            ("byEndpoint", params.byEndpoint),
            ("byLabel", params.byLabel),
            ("byRole", params.byRole),
        ):
            for key, spec in table.items():
                spec.check(f"{field}[{key!r}]")
        base = Rates(params.fixedSeconds, 1.0 / params.prefillTokensPerSecond, params.encoderSecondsPerToken)
        self.table = RateTable(
            base, by_endpoint=params.byEndpoint, by_label=params.byLabel, by_role=params.byRole
        )
        self.learner = RateLearner(
            base,
            self.table.configured,
            learn=params.learn,
            min_samples=params.minSamples,
            half_life_samples=params.halfLifeSamples,
            prior_samples=params.priorSamples,
        )
        self._prefix_key: DataKey[PrefixMatch] = PREFIX_MATCH.scoped(params.prefixMatchInfoProducerName)
        self._encoder_key: DataKey[EncoderCacheMatch] = ENCODER_CACHE_MATCH.scoped(
            params.encoderCacheProducerName
        )
        self._load_key: DataKey[Any] = INFLIGHT_LOAD.scoped(params.inFlightLoadProducerName)
        self._keys = self.own_keys(PREDICTED_TTFT)
        self._key_names = [key.name for key in self._keys]
        # in a request's data: (serving pod, media tokens, encoder seconds) the encode decider
        # left on the serving pod (stages_planned), for the fit (on_started)
        self._local_key = f"{name}/encoded-on-serving-pod"
        self._rates_now = self.learner.current.get
        self._pending: dict[str, _Pending] = {}
        self._tokens_sum = 0.0  # decayed sums behind the mean prompt size placed
        self._tokens_weight = 0.0
        if not params.queueAverageSeconds > 0:
            raise ValueError(f"queueAverageSeconds must be > 0, got {params.queueAverageSeconds}")
        self._queue_tau = params.queueAverageSeconds
        self._pods: dict[str, _Pod] = {}  # per endpoint: its queue average, front end and reuse
        self._queue_at = -math.inf  # when the averages were last updated
        self._hits = 0.0  # decayed placements that reused an endpoint's cached content ...
        self._colds = 0.0  # ... and that placed content where it was not cached
        self._work_sum = 0.0  # decayed sums behind the mean GPU work of a placed request
        self._work_weight = 0.0
        self.frontend = FrontendPricer(params.frontEnd)
        self._front_rates = self.frontend.table  # priced by the compiled function, not the method

    def produces(self) -> tuple[DataKey[Any], ...]:
        return self._keys

    def consumes(self) -> tuple[DataKey[Any], ...]:
        return (TOKENIZED_PROMPT, self._prefix_key, self._encoder_key, self._load_key)

    def produce(self, request: SchedulingRequest, endpoints: Sequence[EndpointState]) -> None:
        # The data bag is read directly, each value's type checked: a call per read is a
        # measurable share of a decision.
        data = request.data
        tp = data.get(TOKENIZED_PROMPT.name)
        if not isinstance(tp, TokenizedPrompt):
            tp = None
        prefix = data.get(self._prefix_key.name)
        encoder = data.get(self._encoder_key.name)
        if not isinstance(encoder, EncoderCacheMatch):
            encoder = None
        total = tp.total_tokens if tp is not None else 0
        front = NO_FRONTEND
        front_rates = self._front_rates
        if tp is not None and front_rates and tp.media:
            front = frontend_seconds(front_rates, request.view.parts, tp.media)
        load, processing, skipped = front
        items, first_end, media = _encoder_items(tp, encoder, skipped)
        held_by = encoder.matched_indices if encoder is not None else _NOTHING_HELD
        if isinstance(prefix, PrefixMatch):
            matched, block, prompt = prefix.matched, prefix.block_size, prefix.prompt_tokens
        else:
            matched, block, prompt = {}, 0, 0
        learner = self.learner
        rates_now = self._rates_now
        mean_tokens = self._tokens_sum / self._tokens_weight if self._tokens_weight else 0.0
        service = self._work_sum / self._work_weight if self._work_weight else 0.0  # mean_placed_work
        now, staleness = request.now, request.staleness_s
        pods = self._pods
        elapsed = now - self._queue_at
        pull = 1.0 if elapsed == math.inf else -math.expm1(-elapsed / self._queue_tau)
        self._queue_at = now
        queued_front = processing > 0.0  # no processor work: no processor queue to wait behind
        drawn = self._hits / max(self._colds, 1.0)  # later_requests_per_cold_placement
        seconds: dict[str, float] = {}
        stale: list[str] = []
        rows: list[Candidate] = []  # each candidate's terms, work and future cost but the holders' part
        worst_known = -1.0
        most_reused = 0
        holders_wait = math.inf  # the least marginal wait among those holding the most of it
        # One pass per candidate on every decision: locals, attribute reads and arithmetic only.
        for ep in endpoints:
            name = ep.name
            hits = 0
            saved = 0.0
            # Looked up for every candidate: most pods hold at least the chat template's first
            # blocks, so a set of the holders to test first would cost more than it skips.
            blocks = matched.get(name)
            if blocks:
                cached = blocks * block
                if cached > prompt:
                    cached = prompt
            else:
                cached = 0
            held = held_by.get(name)
            if held or cached >= first_end:  # else every item is past the cached prefix, none held
                encode = 0
                for item in items:
                    if item.end > cached:
                        if held and item.index in held:
                            hits += item.length
                            saved += item.skip
                        else:
                            encode += item.length
                    else:
                        saved += item.skip
            else:
                encode = media
            flight = ep.inflight
            ahead = flight.tokens
            m = ep.metrics
            if m is None or not now - m.scraped_at <= staleness:
                fresh = False
            else:
                fresh = True
                waiting = m.waiting
                if waiting:
                    queued = waiting * mean_tokens
                    if queued >= ahead + 1:  # its whole tokens exceed those in flight
                        ahead = int(queued)
            uncached = total - cached if total > cached else 0
            pod = pods.get(name)
            if pod is None:
                pod = pods[name] = _Pod()
            rates = rates_now(name)
            if rates is None:
                rates = learner.rates(ep)
            if rates is not pod.rates:
                pod.rates = rates
                pod.f, pod.p, pod.s, pod.h, pod.c, pod.q = rates.vector
            f, p, s, h, c, q = pod.f, pod.p, pod.s, pod.h, pod.c, pod.q
            media_ahead = flight.media_tokens
            encoder_work = media_ahead + encode
            prefill = p * uncached
            held_hits = h * hits
            held_prefix = c * cached
            queue = q * ahead
            # Rates.seconds of the terms below, summed in its order (so bit for bit the same),
            # then the front end: the request's own, less what the processor cache holds, and the
            # processor's backlog past this request's load.
            predicted = f + prefill + s * encoder_work + held_hits + held_prefix + queue + load + processing
            if saved:  # processor seconds believed cache hits save
                predicted -= saved
            if queued_front:
                fq = pod.front
                if fq is not None:
                    left = fq.until - now
                    if left > load:
                        predicted += left - load
            seconds[name] = predicted
            wait = queue + s * media_ahead
            avg = pod.avg
            if avg is not None:
                wait = avg + pull * (wait - avg)
            pod.avg = wait
            if service > 0:
                load_share = wait / service
                marginal = wait * (2.0 + load_share)
            else:
                marginal, load_share = wait, 0.0
            fresh_work = prefill + s * encode
            own_work = fresh_work + held_hits + held_prefix
            reused = hits + cached
            if reused:
                if reused > most_reused:
                    most_reused, holders_wait = reused, marginal
                elif reused == most_reused and marginal < holders_wait:
                    holders_wait = marginal
            displaced = pod.displaced
            # the future cost's displaced reuse and the delay to those queued behind, summed in
            # the equation's order after the holders' part (known only after the loop); the
            # terms and the work in the same row (only the chosen endpoint's are read)
            rows.append(
                (
                    name,
                    marginal,
                    (drawn if displaced is None else displaced) * fresh_work,
                    own_work * load_share * (1.0 + load_share),
                    own_work,
                    saved,
                    uncached,
                    encoder_work,
                    hits,
                    cached,
                    ahead,
                )
            )
            if not fresh:
                stale.append(name)
            elif predicted > worst_known:
                worst_known = predicted
        if worst_known >= 0:
            for name in stale:
                seconds[name] += worst_known
        future: dict[str, float] = {}
        for row in rows:  # indexed: compiled, an unpacking would unbox all eleven fields
            marginal = row[1]
            future[row[0]] = drawn * (marginal if marginal < holders_wait else holders_wait) + row[2] + row[3]
        info = PredictedTTFT(seconds, rows, stale, future, (load, processing), most_reused)
        for key in self._key_names:
            data[key] = info

    @property
    def later_requests_per_cold_placement(self) -> float:
        """``n``: believed hits per placement of content where it was not cached, decayed (at
        least one cold placement is assumed, so a fleet of hits alone gives a finite count)."""
        return self._hits / max(self._colds, 1.0)

    @property
    def mean_placed_work(self) -> float:
        """``S``: the mean GPU work (encode and prefill, seconds) of the requests placed lately."""
        return self._work_sum / self._work_weight if self._work_weight else 0.0

    def queue_average(self, name: str) -> float:
        """``Qbar_e``: the endpoint's predicted queue wait, averaged over recent decisions."""
        pod = self._pods.get(name)
        return 0.0 if pod is None or pod.avg is None else pod.avg

    def displaced_reuse(self, name: str) -> float:
        """``r_e``: the seconds the endpoint's believed hits would have cost without its caches,
        per second of new work (content it did not hold) placed on it, decayed: what a second of
        its cache room has been worth to later requests. ``n`` until anything is placed there."""
        pod = self._pods.get(name)
        if pod is None or pod.displaced is None:
            return self.later_requests_per_cold_placement
        return pod.displaced

    # -- learning from what happened -------------------------------------------------------------

    def on_started(
        self, request: SchedulingRequest, endpoint: EndpointState, profile: str, now: float
    ) -> None:
        rid = request.request_id
        if rid in self._pending:  # the other stages' pods of the same request: not timed here
            return
        info = request.get(self._keys[0])
        if info is None:
            return
        row = info.candidate(endpoint.name)
        if row is None:
            return
        _, _, _, _, work, saved, p, e, h, c, a = row
        local_tokens, local_s = 0, 0.0
        local = request.data.get(self._local_key)
        if isinstance(local, tuple) and local[0] == endpoint.name:
            _, local_tokens, local_s = local
        x = (1.0, p, e - local_tokens, h, c, a)
        pending = self._pending[rid] = _Pending(endpoint, now, x, request.view.first_byte_ends_prefill)
        pod = self._pods.get(endpoint.name)
        if pod is None:
            pod = self._pods[endpoint.name] = _Pod()
        if local_tokens:  # its own work there: encoded, not received
            work += local_s - pod.s * local_tokens
        load, processing = info.frontend
        processing -= saved
        if processing > 0:
            fq = pod.front
            if fq is None:
                fq = pod.front = FrontendQueue()
            backlog = fq.backlog(now)
            pending.front_wait = (backlog if backlog > load else load) + processing
            pending.front_end = fq.place(processing, now + load)
        else:
            pending.front_wait = load
        pending.front_wait += local_s  # priced apart, as the front end: not the engine's rates
        most = info.most_reused
        cold = 1.0 - (x[3] + x[4]) / most if most > 0 else 1.0
        self._hits = self._hits * REUSE_DECAY + (1.0 - cold)
        self._colds = self._colds * REUSE_DECAY + cold
        self._work_sum = self._work_sum * MEAN_TOKENS_DECAY + work
        # What this placement reuses on the endpoint, and the new work it caches there, in seconds.
        r = self.learner.rates(endpoint)
        reused = r.encoder_s_per_token * x[3] + r.prefill_s_per_token * x[4]
        new = work - r.encoder_hit_s_per_token * x[3] - r.prefix_hit_s_per_token * x[4]
        kept = pod.kept = pod.kept * REUSE_DECAY + reused
        placed = pod.placed = pod.placed * REUSE_DECAY + new
        pod.displaced = kept / placed if placed > 0 else None
        self._work_weight = self._work_weight * MEAN_TOKENS_DECAY + 1.0
        tp = request.get(TOKENIZED_PROMPT)
        if tp is not None:
            self._tokens_sum = self._tokens_sum * MEAN_TOKENS_DECAY + tp.total_tokens
            self._tokens_weight = self._tokens_weight * MEAN_TOKENS_DECAY + 1.0

    def stages_planned(self, request: SchedulingRequest, target: EndpointState) -> None:
        """The encode decider has chosen: media it left on ``target`` are encoded there, at the
        encoder seconds it priced them at, not received at ``encoderSecondsPerToken``; the
        target's prediction is corrected to that placement (the other candidates' are not read
        again)."""
        data = request.data
        choice = data.get(ENCODE_CHOICE.name)
        if not isinstance(choice, EncodeChoice):
            return
        name = target.name
        local_s = choice.seconds.get(name, 0.0)
        info = data.get(self._key_names[0])
        if local_s <= 0.0 or not isinstance(info, PredictedTTFT) or name not in info.seconds:
            return
        tp = data.get(TOKENIZED_PROMPT.name)
        if not isinstance(tp, TokenizedPrompt):
            return
        tokens = _received_tokens(
            tp,
            None if choice.outcome == "local" else {i for i, e in choice.plan.items() if e == LOCAL},
            data.get(self._prefix_key.name),
            data.get(self._encoder_key.name),
            name,
        )
        pod = self._pods.get(name)
        per_token = pod.s if pod is not None else 0.0
        info.seconds[name] += local_s - per_token * tokens
        data[self._local_key] = (name, tokens, local_s)

    def on_stage_done(self, request: SchedulingRequest, endpoint: EndpointState, now: float) -> None:
        # The serving pod gets the request once the encode / prefill legs are over (the gateway
        # runs them, and says when each pod's legs end): its own TTFT starts there, so the fit
        # learns that pod's rates, not the wait for other pods' stages.
        pending = self._pending.get(request.request_id)
        if pending is not None and pending.started < now:
            pending.started = now

    def on_first_token(self, request: SchedulingRequest, now: float) -> None:
        pending = self._pending.pop(request.request_id, None)
        if pending is None:
            return
        if pending.front_end:
            pod = self._pods.get(pending.endpoint.name)
            fq = None if pod is None else pod.front
            if fq is not None:
                fq.through(pending.front_end, now)
        if pending.learnable:  # the rates are the engine's: the front end's part is priced apart
            ttft = now - pending.started - pending.front_wait
            self.learner.observe(pending.endpoint, pending.terms, ttft if ttft > 0 else 0.0)

    def on_finished(self, request: SchedulingRequest, now: float) -> None:
        self._pending.pop(request.request_id, None)

    def frontend_backlog(self, name: str, now: float) -> float:
        """Seconds of processor work this gateway placed on ``name`` not yet through at ``now``."""
        pod = self._pods.get(name)
        return 0.0 if pod is None or pod.front is None else pod.front.backlog(now)

    def remove_endpoint(self, name: str) -> None:
        self.learner.forget(name)
        self._pods.pop(name, None)


def _encoder_items(
    tp: TokenizedPrompt | None, encoder: EncoderCacheMatch | None, skipped: dict[str, float]
) -> tuple[list[_Item], int, int]:
    """The request's distinct media items that need the encoder (:class:`_Item`): what the
    per-endpoint loop reads; with the smallest end (a prefix shorter than it covers none of
    them) and their tokens."""
    if tp is None or not tp.media:
        return [], _NO_END, 0
    ids = encoder.identities if encoder is not None else ()  # a handful: a list scan beats a dict
    items: list[_Item] = []
    seen: set[str] = set()
    first_end, media = _NO_END, 0
    for item in tp.media:
        identity, length = item.identity, item.length
        if identity in seen or item.modality == _EMBEDS:
            continue
        seen.add(identity)
        end = item.offset + length
        try:  # the encoder-cache match lists every distinct item: one scan, not a test and a scan
            index = ids.index(identity) if ids else -1
        except ValueError:
            index = -1
        items.append(_Item(end, length, index, skipped.get(identity, 0.0)))
        if end < first_end:
            first_end = end
        media += length
    return items, first_end, media


def _received_tokens(
    tp: TokenizedPrompt, local: set[str] | None, prefix: object, encoder: object, name: str
) -> int:
    """The media tokens of the items in ``local`` (``None``: every item) that the prediction for
    ``name`` priced as encoder outputs to receive: distinct, not precomputed embeddings, past the
    prefix ``name`` is believed to hold and not in its encoder cache (as the candidate loop)."""
    cached = prefix.matched_tokens(name) if isinstance(prefix, PrefixMatch) else 0
    held: list[int] = []
    ids: list[str] = []
    if isinstance(encoder, EncoderCacheMatch):
        held = encoder.matched_indices.get(name, [])
        ids = encoder.identities
    tokens = 0
    seen: set[str] = set()
    for item in tp.media:
        identity = item.identity
        if identity in seen or item.modality == _EMBEDS:
            continue
        seen.add(identity)
        if local is not None and identity not in local:
            continue
        if item.offset + item.length <= cached:
            continue
        if held and identity in ids and ids.index(identity) in held:
            continue
        tokens += item.length
    return tokens
