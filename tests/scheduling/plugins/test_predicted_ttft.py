"""predicted-ttft-producer, predicted-ttft-scorer and predicted-ttft-slo-filter through a real
scheduler: the trade between a cache hit and a queue, pessimism about unknown pods, the SLO
filter, and learning from observed TTFTs through the lifecycle hooks."""

from __future__ import annotations

from typing import Any

import pytest

from mmgate.config import ConfigError
from mmgate.request.view import Api, RequestView
from mmgate.scheduling import EndpointState, Metrics, Scheduler, SchedulingRequest
from mmgate.scheduling.keys import PREDICTED_TTFT, PredictedTTFT
from mmgate.scheduling.plugins.predicted_ttft_producer import PredictedTTFTProducer
from support.scheduling import image, scheduler

PREFILL = 10_000.0  # tokens/s
ENCODER = 1e-4  # s per media token: a 900-token image encodes in 90 ms


def build(
    producer: dict[str, Any] | None = None,
    slo: dict[str, Any] | None = None,
    scorer: dict[str, Any] | None = None,
) -> Scheduler:
    params = {"prefillTokensPerSecond": PREFILL, "encoderSecondsPerToken": ENCODER, "fixedSeconds": 0.01}
    params.update(producer or {})
    plugins: list[dict[str, Any]] = [
        {"type": "predicted-ttft-producer", "parameters": params},
        {"type": "predicted-ttft-scorer", "parameters": scorer},
    ]
    refs = [{"pluginRef": "predicted-ttft-scorer"}]
    if slo is not None:
        plugins.append({"type": "predicted-ttft-slo-filter", "parameters": slo})
        refs.insert(0, {"pluginRef": "predicted-ttft-slo-filter"})
    return scheduler(plugins, refs)


def fleet(n: int, **metrics: Any) -> list[EndpointState]:
    return [EndpointState(f"10.0.0.{i}:8000", metrics=Metrics(**metrics)) for i in range(n)]


def req(
    rid: str, *parts: Any, stream: bool = True, headers: dict[str, str] | None = None
) -> SchedulingRequest:
    view = RequestView(Api.CHAT, "m", list(parts or ("hello",)), stream=stream)
    return SchedulingRequest(view, rid, headers)


def serve(s: Scheduler, r: SchedulingRequest, eps: list[EndpointState], t0: float, ttft: float) -> str:
    """Schedule, send, see the first token ``ttft`` later, finish: the gateway's calls."""
    result = s.schedule(r, eps, t0)
    s.pre_request(r, result, t0)
    s.start(r, result, t0)
    s.on_first_token(r.request_id, t0 + ttft)
    s.on_finished(r.request_id, t0 + ttft + 0.1)
    return result.target.name


def predicted(r: SchedulingRequest) -> PredictedTTFT:
    info = r.get(PREDICTED_TTFT)
    assert info is not None
    return info


def test_a_cache_hit_wins_while_what_it_saves_exceeds_the_queue_it_costs() -> None:
    s = build({"learn": False})
    eps = fleet(2)
    text = "a long shared system prompt " * 100
    first = req("a", text, image("img-1", 1280, 720))
    where = serve(s, first, eps, 0.0, 0.2)
    holder, other = (eps[0], eps[1]) if where == eps[0].name else (eps[1], eps[0])

    again = req("b", text, image("img-1", 1280, 720), "a new question")
    assert s.schedule(again, eps, 1.0).target is holder
    p = predicted(again)
    saved = p.seconds[other.name] - p.seconds[holder.name]
    assert saved > 0.09  # the image's encode (90 ms) and the cached prefix's prefill

    holder.inflight.tokens = int((saved - 0.02) * PREFILL)  # a queue a little shorter than the saving
    assert s.schedule(req("c", text, image("img-1", 1280, 720), "q"), eps, 2.0).target is holder
    holder.inflight.tokens = int((saved + 0.02) * PREFILL)  # a little longer: the cold pod is faster
    assert s.schedule(req("d", text, image("img-1", 1280, 720), "q"), eps, 3.0).target is other


def test_work_weight_also_counts_the_gpu_time_a_hit_saves_for_the_requests_behind() -> None:
    """With workWeight 1 a pod is charged its predicted TTFT plus the request's own encode and
    prefill there: a hit that is a little slower to first token still wins, since the encode
    it skips shortens the queue for everyone after it."""
    cold, sticky = build({"learn": False}), build({"learn": False}, scorer={"workWeight": 1})
    for s in (cold, sticky):
        eps = fleet(2)
        text = "a long shared system prompt " * 100
        where = serve(s, req("a", text, image("img-1", 1280, 720)), eps, 0.0, 0.2)
        holder, other = (eps[0], eps[1]) if where == eps[0].name else (eps[1], eps[0])
        probe = req("b", text, image("img-1", 1280, 720), "q")
        s.schedule(probe, eps, 1.0)
        p = predicted(probe)
        saved = p.seconds[other.name] - p.seconds[holder.name]
        skipped = p.frontend_saved.get(holder.name, 0.0)  # the HF processor its processor cache skips
        assert skipped > 0 and other.name not in p.frontend_saved
        assert p.work[other.name] - p.work[holder.name] + skipped == pytest.approx(
            saved
        )  # idle pods: the rest of it is work
        holder.inflight.tokens = int((saved + 0.02) * PREFILL)  # 20 ms later to first token
        chosen = s.schedule(req("c", text, image("img-1", 1280, 720), "q"), eps, 2.0).target
        assert chosen is (other if s is cold else holder)


def test_the_future_cost_is_the_displaced_reuse_and_the_queue_behind_the_work() -> None:
    s = build({"learn": False}, scorer={"futureWeight": 1})
    eps = fleet(2)
    text = "a long shared system prompt " * 100
    where = serve(s, req("a", text), eps, 0.0, 0.2)  # placed where nothing held it: cold
    holder, other = (eps[0], eps[1]) if where == eps[0].name else (eps[1], eps[0])
    serve(s, req("b", text, "a question"), eps, 1.0, 0.1)  # a hit on the holder
    producer = s.plugins["predicted-ttft-producer"]
    assert isinstance(producer, PredictedTTFTProducer)
    drawn = producer.later_requests_per_cold_placement
    assert drawn == pytest.approx(1.0, rel=0.01)  # one hit per cold placement so far
    # the holder's cache saved the second request most of its prefill: worth more than 0.5 s a
    # second of the new work placed there; nothing was placed on the other pod yet (n stands in)
    reuse = producer.displaced_reuse(holder.name)
    assert 0.5 < reuse < 1.0
    assert producer.displaced_reuse(other.name) == drawn
    other.inflight.tokens = 5_000  # 0.5 s ahead on the other pod
    probe = req("c", text, "another question")
    s.schedule(probe, eps, 2.0)
    p = predicted(probe)
    average = producer.queue_average(other.name)
    assert 0 < average < 0.5  # the last 30 s's average, not this instant's queue
    assert producer.queue_average(holder.name) == 0.0
    service = producer.mean_placed_work
    assert service > 0
    # The holder's queue has been empty: its later requests wait nothing more there, and a copy
    # on the other pod would not change that (they go to the holder). What differs is the cache
    # room (the holder: the new question's prefill at its cache's worth; the other pod: the whole
    # prompt's) and the queue the request's own work makes wait behind it on the other pod.
    assert p.future[holder.name] == pytest.approx(reuse * p.work[holder.name])
    load = average / service
    assert p.future[other.name] == pytest.approx(drawn * p.work[other.name] * (1 + load * (1 + load)))
    assert p.work[holder.name] < 0.2 * p.work[other.name]


def test_a_copy_beside_a_busy_holder_is_credited_with_the_queue_it_takes_off_the_holder() -> None:
    """A popular image's later requests go to whichever pod holds it. Left on one holder they all
    meet that holder's marginal wait; a copy on a pod whose queue has been shorter lets them meet
    that one's instead, so the copy's future queue is the shorter of the two, never more than
    staying. With the holder's queue long on average (empty right now, so its predicted TTFT is
    the lower: the encode is saved), the copy wins; without the future cost the hit does."""
    for weight, copies in ((0.0, False), (1.0, True)):
        s = build({"learn": False}, scorer={"futureWeight": weight})
        eps = fleet(2)
        photo = image("img-popular", 1280, 720)
        where = serve(s, req("a", "q0", photo), eps, 0.0, 0.2)  # the first placement: cold
        holder, other = (eps[0], eps[1]) if where == eps[0].name else (eps[1], eps[0])
        for i in range(1, 4):  # three hits on the holder: each cold placement has drawn three
            assert serve(s, req(f"h{i}", f"q{i}", photo), eps, float(i), 0.1) == holder.name
        holder.inflight.tokens = 5_000  # the holder has been busy (0.5 s ahead) ...
        s.schedule(req("probe", "hello"), eps, 100.0)
        holder.inflight.tokens = 0  # ... and is idle at this instant
        r = req("again", "q9", photo)
        chosen = s.schedule(r, eps, 100.0).target
        p = predicted(r)
        assert p.seconds[holder.name] < p.seconds[other.name]  # greedy: the hit
        assert chosen is (other if copies else holder)
    producer = s.plugins["predicted-ttft-producer"]
    assert isinstance(producer, PredictedTTFTProducer)
    service = producer.mean_placed_work
    wait = producer.queue_average(holder.name)
    assert 0.45 < wait <= 0.5 and producer.queue_average(other.name) == 0.0  # 97 s of a 30-s window
    drawn = producer.later_requests_per_cold_placement
    assert drawn == pytest.approx(3.0, rel=0.02)
    held = wait * (2 + wait / service)  # the holder's marginal wait: what staying costs later
    load = wait / service
    assert p.future[holder.name] == pytest.approx(
        drawn * held
        + producer.displaced_reuse(holder.name) * (p.work[holder.name])
        + p.work[holder.name] * load * (1 + load)
    )
    assert p.future[other.name] == pytest.approx(producer.displaced_reuse(other.name) * p.work[other.name])


def test_new_content_goes_where_cache_room_has_been_worth_least() -> None:
    """Content nobody holds displaces whatever the chosen pod's cache evicts next. A pod whose
    cache has been saving its requests work (hits) loses more by that than a pod whose cache
    nobody reused: with queues alike, new content goes to the latter."""
    s = build({"learn": False}, scorer={"futureWeight": 1})
    eps = fleet(2)
    photo = image("img-reused", 1280, 720)
    where = serve(s, req("a", "q0", photo), eps, 0.0, 0.2)
    reused = eps[0] if where == eps[0].name else eps[1]
    unused = eps[1] if reused is eps[0] else eps[0]
    for i in range(1, 4):
        serve(s, req(f"h{i}", f"q{i}", photo), eps, float(i), 0.1)
    producer = s.plugins["predicted-ttft-producer"]
    assert isinstance(producer, PredictedTTFTProducer)
    for i in range(5):  # unrelated photos, never asked again, all placed on the other pod
        r = req(f"u{i}", "q", image(f"img-once-{i}", 1280, 720))
        result = s.schedule(r, [unused], 10.0 + i)
        s.pre_request(r, result, 10.0 + i)
        s.start(r, result, 10.0 + i)
        s.on_first_token(r.request_id, 10.1 + i)
        s.on_finished(r.request_id, 10.2 + i)
    assert producer.displaced_reuse(unused.name) == 0.0
    assert producer.displaced_reuse(reused.name) > 0.3
    for i in range(5):
        r = req(f"n{i}", "q", image(f"img-new-{i}", 1280, 720))
        assert s.schedule(r, eps, 200.0 + i).target is unused


def test_new_content_goes_where_the_queue_has_been_shortest_not_where_it_is_now() -> None:
    """Nothing holds the request's prompt, so where it goes is where its later requests will go.
    One pod's queue was long a moment ago; now it is empty and the other pod has 10 ms of work
    ahead. Greedy for this TTFT the request takes the busy pod; with the future queue priced it
    takes the one whose queue has been short, as its later requests will meet that pod's
    average, not this instant's."""
    for weight, expected in ((0.0, 0), (1.0, 1)):
        s = build({"learn": False}, scorer={"futureWeight": weight})
        eps = fleet(2)
        text = "a system prompt " * 100
        where = serve(s, req("a", text), eps, 0.0, 0.2)
        serve(s, req("b", text, "q"), eps, 1.0, 0.1)  # a hit: later requests follow the cache
        busy = eps[0] if where == eps[1].name else eps[1]  # make the non-holder the busy one
        idle = eps[1] if busy is eps[0] else eps[0]
        busy.inflight.tokens = 20_000
        s.schedule(req("probe", "other words " * 10), eps, 2.0)
        busy.inflight.tokens, idle.inflight.tokens = 0, 100  # now: 10 ms ahead on the idle one
        chosen = s.schedule(req("new", "a different prompt entirely " * 100), eps, 3.0).target
        assert chosen is (busy, idle)[expected]


def test_media_ahead_in_the_queue_costs_encoder_time() -> None:
    s = build({"learn": False})
    eps = fleet(2)
    eps[0].inflight.tokens = eps[1].inflight.tokens = 2000
    eps[0].inflight.media_tokens = 1800  # the same tokens ahead, but most of them still to encode
    r = req("a", "hello")
    assert s.schedule(r, eps, 0.0).target is eps[1]
    p = predicted(r)
    assert p.seconds[eps[0].name] - p.seconds[eps[1].name] == pytest.approx(1800 * ENCODER)


def test_the_scraped_queue_counts_when_other_gateways_fill_it() -> None:
    s = build({"learn": False})
    eps = fleet(2)
    serve(s, req("warm", "a prompt of some length " * 50), eps, 0.0, 0.1)  # the mean prompt size
    eps[0].metrics = Metrics(waiting=40, scraped_at=1.0)  # requests this gateway did not send
    eps[1].metrics = Metrics(waiting=0, scraped_at=1.0)
    r = req("a", "hello")
    assert s.schedule(r, eps, 1.0).target is eps[1]
    p = predicted(r)
    assert p.terms[eps[0].name][5] > 40 * 100  # 40 waiting requests of the mean size ahead


@pytest.mark.parametrize("unknown", ["missing", "stale"])
def test_a_pod_without_fresh_metrics_is_never_preferred(unknown: str) -> None:
    s = build({"learn": False})
    eps = fleet(3, scraped_at=100.0)
    eps[0].inflight.tokens = eps[1].inflight.tokens = 30_000  # the known pods are busy
    eps[2].metrics = None if unknown == "missing" else Metrics(scraped_at=0.0)  # 100 s old
    targets = set()
    for i in range(20):
        r = req(f"r{i}", "hello")
        targets.add(s.schedule(r, eps, 100.0).target.name)
        p = predicted(r)
        assert p.stale == [eps[2].name]
        assert p.seconds[eps[2].name] > max(p.seconds[eps[0].name], p.seconds[eps[1].name])
    assert eps[2].name not in targets


def test_without_any_fresh_metrics_the_gateways_own_counts_decide() -> None:
    s = build({"learn": False})
    eps = [EndpointState(f"10.0.0.{i}:8000") for i in range(2)]
    eps[0].inflight.tokens = 10_000
    assert s.schedule(req("a", "hello"), eps, 0.0).target is eps[1]


def test_slo_filter_drops_endpoints_over_the_slo_unless_all_are() -> None:
    s = build({"learn": False}, slo={"sloSeconds": 0.5})
    eps = fleet(3)
    eps[0].inflight.tokens = 2_000  # 0.2 s ahead: within the SLO
    eps[1].inflight.tokens = 20_000  # 2 s: over
    eps[2].inflight.tokens = 3_000  # 0.3 s: within
    slo = s.profiles["default"].filters[0]
    assert [e.name for e in slo.filter(_produced(s, req("a", "hi"), eps), eps)] == [eps[0].name, eps[2].name]
    for ep in eps:
        ep.inflight.tokens = 20_000  # every endpoint over: all kept
    assert slo.filter(_produced(s, req("b", "hi"), eps), eps) == eps
    # the request's header (milliseconds, llm-d's x-slo-ttft-ms) overrides the parameter
    eps[0].inflight.tokens = 2_000
    tight = req("c", "hi", headers={"x-slo-ttft-ms": "100"})
    assert slo.filter(_produced(s, tight, eps), eps) == eps  # 0.2 s misses 100 ms: none meets it
    loose = req("d", "hi", headers={"x-slo-ttft-ms": "2500"})
    assert slo.filter(_produced(s, loose, eps), eps) == eps  # all meet 2.5 s
    bad = req("e", "hi", headers={"x-slo-ttft-ms": "soon"})  # unreadable: the parameter applies
    assert slo.filter(_produced(s, bad, eps), eps) == [eps[0]]


def _produced(s: Scheduler, r: SchedulingRequest, eps: list[EndpointState]) -> SchedulingRequest:
    r.now = 0.0
    for producer in s.producers:
        producer.produce(r, eps)
    return r


def test_learning_from_observed_ttfts_sends_less_work_to_a_slow_pod() -> None:
    """No rate configured for either pod; the slow one prefills 4x slower. Requests arrive every
    100 ms (about 75% of the pair's capacity); each pod prefills its queue in order. After
    observing TTFTs the producer predicts each pod's own speed and the slow pod gets less work."""
    s = build({"minSamples": 10})
    eps = fleet(2)
    fast, slow = eps[0].name, eps[1].name
    per_token = {fast: 1 / 20_000, slow: 1 / 5_000}
    busy_until = {fast: 0.0, slow: 0.0}
    firsts: list[tuple[float, str]] = []  # (time of first token, request id)
    tokens_to = {fast: 0, slow: 0}
    for i in range(600):
        t = i * 0.1
        firsts.sort()
        while firsts and firsts[0][0] <= t:
            when, rid = firsts.pop(0)
            s.on_first_token(rid, when)
            s.on_finished(rid, when)
        words = 200 + (i * 37) % 1500
        r = req(f"r{i}", f"question {i} " + "word " * words)
        result = s.schedule(r, eps, t)
        s.pre_request(r, result, t)
        s.start(r, result, t)
        name = result.target.name
        tokens = 2 * words + 20
        done = max(t, busy_until[name]) + 0.01 + tokens * per_token[name]
        busy_until[name] = done
        firsts.append((done, r.request_id))
        if i >= 300:
            tokens_to[name] += tokens
    producer = s.plugins["predicted-ttft-producer"]
    assert isinstance(producer, PredictedTTFTProducer)
    learner = producer.learner
    assert learner.learned(fast) and learner.learned(slow)
    assert learner.rates(eps[1]).prefill_s_per_token > 2.5 * learner.rates(eps[0]).prefill_s_per_token
    assert tokens_to[slow] < 0.5 * tokens_to[fast]


@pytest.mark.parametrize("stages_seen", [True, False])
def test_the_serving_pods_time_starts_when_the_stage_legs_ended(stages_seen: bool) -> None:
    """E/PD in gateway mode: each request waits 1 s for its encode legs, then its PD pod takes
    20 ms. Told when the legs ended, the producer learns the PD pod's own 20 ms; not told (the
    legs ran out of its sight), the wait is part of what it learns."""
    s = build({"minSamples": 5})
    eps = fleet(1)
    encoder = EndpointState("10.0.0.9:8000")
    producer = s.plugins["predicted-ttft-producer"]
    assert isinstance(producer, PredictedTTFTProducer)
    for i in range(30):
        t0 = 10.0 * i
        r = req(f"r{i}", "hello")
        result = s.schedule(r, eps, t0)
        s.pre_request(r, result, t0)
        s.start(r, result, t0)
        if stages_seen:
            producer.on_stage_done(r, encoder, t0 + 1.0)
        s.on_first_token(r.request_id, t0 + 1.02)
        s.on_finished(r.request_id, t0 + 1.1)
    assert producer.learner.learned(eps[0].name)
    fixed = producer.learner.rates(eps[0]).fixed_s
    assert (fixed < 0.1) if stages_seen else (fixed > 0.5), fixed


def test_only_streamed_answers_teach_it() -> None:
    s = build({"minSamples": 1})
    eps = fleet(1)
    for i in range(5):
        serve(s, req(f"r{i}", "hello", stream=False), eps, float(i), 3.0)  # first byte = last byte
    producer = s.plugins["predicted-ttft-producer"]
    assert isinstance(producer, PredictedTTFTProducer)
    assert producer.learner.samples(eps[0].name) == 0
    serve(s, req("s", "hello"), eps, 10.0, 0.05)
    assert producer.learner.samples(eps[0].name) == 1


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"prefillTokensPerSecond": 0}, "prefillTokensPerSecond must be > 0"),
        (
            {"byRole": {"decode": {"encoderSecondsPerToken": -1}}},
            r"byRole\['decode'\].encoderSecondsPerToken",
        ),
        ({"byLabel": {"gpu": {"fixedSeconds": 0.1}}}, "label=value"),
        ({"halfLifeSamples": 2}, "forgets too fast"),
        ({"prefillRate": 1}, "prefillRate"),
    ],
)
def test_bad_parameters_are_config_errors(params: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        build(params)


def test_bad_slo_or_work_weight_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="sloSeconds"):
        build(slo={"sloSeconds": -1})
    with pytest.raises(ConfigError, match="workWeight"):
        build(scorer={"workWeight": -0.5})
    with pytest.raises(ConfigError, match="futureWeight"):
        build(scorer={"futureWeight": -1})
    with pytest.raises(ConfigError, match="queueAverageSeconds"):
        build({"queueAverageSeconds": 0})
