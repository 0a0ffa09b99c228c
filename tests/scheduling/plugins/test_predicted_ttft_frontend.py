"""predicted-ttft-producer's front-end term through a real scheduler: a pod whose processor is
busy with clips is predicted slower for media requests (not for text ones, which never enter it),
a request's own load overlaps the backlog, the backlog drains and is released by first tokens, an
unknown pod stays pessimistic, and the fit learns the engine's rates apart from it."""

from __future__ import annotations

from typing import Any

import pytest

from mmgate.config import ConfigError
from mmgate.request.view import Api, MediaAsset, RequestView
from mmgate.scheduling import EndpointState, Metrics, Scheduler, SchedulingRequest
from mmgate.scheduling.keys import PREDICTED_TTFT, TOKENIZED_PROMPT, PredictedTTFT
from mmgate.scheduling.plugins.predicted_ttft_producer import PredictedTTFTProducer
from support import views
from support.scheduling import scheduler

VIDEO_S_PER_TOKEN = 7e-5  # the processor's, per video token
AUDIO_S = 0.05
FRONT = {
    "video": {"processor": {"tokenSeconds": VIDEO_S_PER_TOKEN}},
    "audio": {"processor": {"itemSeconds": AUDIO_S}},
}


def build(**producer: Any) -> Scheduler:
    params: dict[str, Any] = {
        "prefillTokensPerSecond": 20_000.0,
        "encoderSecondsPerToken": 1e-5,
        "fixedSeconds": 0.01,
        "learn": False,
        "frontEnd": FRONT,
    }
    params.update(producer)
    return scheduler(
        [
            {"type": "predicted-ttft-producer", "parameters": params},
            {"type": "predicted-ttft-scorer"},
        ],
        [{"pluginRef": "predicted-ttft-scorer"}],
    )


def fleet(n: int, **metrics: Any) -> list[EndpointState]:
    return [EndpointState(f"10.0.0.{i}:8000", metrics=Metrics(**metrics)) for i in range(n)]


def clip(identity: str) -> MediaAsset:
    return views.video(identity, 854, 480, 10.0, 24.0)


def req(rid: str, *parts: Any) -> SchedulingRequest:
    return SchedulingRequest(RequestView(Api.CHAT, "m", list(parts or ("hello",)), stream=True), rid)


def predicted(r: SchedulingRequest) -> PredictedTTFT:
    info = r.get(PREDICTED_TTFT)
    assert info is not None
    return info


def producer_of(s: Scheduler) -> PredictedTTFTProducer:
    p = s.plugins["predicted-ttft-producer"]
    assert isinstance(p, PredictedTTFTProducer)
    return p


def send(s: Scheduler, r: SchedulingRequest, eps: list[EndpointState], now: float) -> EndpointState:
    result = s.schedule(r, eps, now)
    s.pre_request(r, result, now)
    s.start(r, result, now)
    return result.target


def video_seconds(r: SchedulingRequest) -> float:
    tp = r.get(TOKENIZED_PROMPT)
    assert tp is not None
    return sum(item.length for item in tp.media) * VIDEO_S_PER_TOKEN


def engine_gap(p: PredictedTTFT, busy: EndpointState, idle: EndpointState) -> float:
    """What the tokens the gateway placed on ``busy`` add to its prediction (the GPU's queue)."""
    ahead, none = p.terms[busy.name], p.terms[idle.name]
    return (ahead[5] - none[5]) / 20_000.0 + (ahead[2] - none[2]) * 1e-5


def test_a_media_request_avoids_the_pod_whose_processor_is_busy_with_a_clip() -> None:
    s = build()
    eps = fleet(2)
    video = req("v", "describe this", clip("clip-1"))
    busy = send(s, video, eps, 0.0)
    work = video_seconds(video)
    assert predicted(video).frontend == pytest.approx((0.0, work))  # its own front end, on any pod
    assert work > 0.3
    idle = next(e for e in eps if e is not busy)

    voice = req("a", "transcribe", views.audio("a-1", 20.0))
    assert s.schedule(voice, eps, 0.1).target is idle  # both GPUs look idle
    p = predicted(voice)
    assert p.frontend == pytest.approx((0.0, AUDIO_S))
    assert p.seconds[busy.name] - p.seconds[idle.name] == pytest.approx(
        engine_gap(p, busy, idle) + work - 0.1
    )

    text = req("t", "hello")  # vLLM tokenizes it on its own pool: the clip's processor is no wait
    s.schedule(text, eps, 0.1)
    p = predicted(text)
    assert p.frontend == (0.0, 0.0)
    assert p.seconds[busy.name] - p.seconds[idle.name] == pytest.approx(engine_gap(p, busy, idle))


def test_a_pod_believed_to_hold_an_item_skips_its_processor_work() -> None:
    """vLLM's processor cache (4 GiB) holds what its encoder cache does and more: where the
    gateway believes the item cached, the HF processor is not charged (the hash still is)."""
    s = build()
    eps = fleet(2)
    first = req("v1", "q", clip("clip-1"))
    holder = send(s, first, eps, 0.0)
    s.on_first_token("v1", 1.0)
    s.on_finished("v1", 2.0)
    again = req("v2", "another question", clip("clip-1"))
    s.schedule(again, eps, 10.0)
    p = predicted(again)
    assert p.frontend_saved == {holder.name: pytest.approx(video_seconds(again))}
    assert p.frontend == pytest.approx((0.0, video_seconds(again)))


def test_a_requests_own_load_overlaps_the_backlog() -> None:
    """A clip decodes on a loading thread while the processor works through what is ahead of
    it: it waits for the longer of the two, then for its own processor work."""
    rates = {"video": {"load": {"tokenSeconds": 1e-4}, "processor": {"tokenSeconds": 1e-5}}}
    s, off = build(frontEnd=rates), build(frontEnd={})
    eps, same = fleet(1), fleet(1)
    producer = producer_of(s)
    send(s, req("v1", "q", clip("clip-1")), eps, 0.0)
    send(off, req("v1", "q", clip("clip-1")), same, 0.0)
    second = req("v2", "q", clip("clip-2"))
    s.schedule(second, eps, 0.0)
    load, processor = predicted(second).frontend
    assert load > 5 * processor > 0
    assert producer.frontend_backlog(eps[0].name, 0.0) == pytest.approx(load + processor)
    without = req("v2", "q", clip("clip-2"))
    off.schedule(without, same, 0.0)
    # the first is through the processor at load + processor; the second, loaded at `load`,
    # starts then: its front end is load + 2 processor from now
    front = predicted(second).seconds[eps[0].name] - predicted(without).seconds[same[0].name]
    assert front == pytest.approx(load + 2 * processor)


def test_the_backlog_drains_with_time_and_a_first_token_releases_it() -> None:
    s = build()
    eps = fleet(2)
    producer = producer_of(s)
    first = req("v1", "q", clip("clip-1"))
    busy = send(s, first, eps, 0.0)
    decode = video_seconds(first)
    assert producer.frontend_backlog(busy.name, decode / 2) == pytest.approx(decode / 2)
    assert producer.frontend_backlog(busy.name, decode + 0.01) == 0.0  # through by the clock
    s.on_first_token("v1", 1.0)
    s.on_finished("v1", 2.0)

    second = req("v2", "q", clip("clip-2"))
    again = send(s, second, eps, 10.0)
    assert producer.frontend_backlog(again.name, 10.0) == pytest.approx(decode)
    s.on_first_token("v2", 10.1)  # the pod's processor was faster than priced
    assert producer.frontend_backlog(again.name, 10.1) == 0.0
    probe = req("t", "hello")
    s.schedule(probe, eps, 10.1)
    p = predicted(probe)
    assert p.seconds[eps[0].name] == pytest.approx(p.seconds[eps[1].name])


def test_a_first_token_earlier_than_expected_moves_the_queue_up() -> None:
    s = build()
    eps = fleet(1)
    producer = producer_of(s)
    send(s, req("v", "q", clip("clip-1")), eps, 0.0)
    send(s, req("a", "q", views.audio("a-1", 5.0)), eps, 0.0)
    work = producer.frontend_backlog(eps[0].name, 0.0)
    assert work > 0.3 + AUDIO_S
    s.on_first_token("v", 0.1)  # the clip went through the processor by 0.1 s, not at ~0.56 s
    assert producer.frontend_backlog(eps[0].name, 0.1) == pytest.approx(AUDIO_S)


@pytest.mark.parametrize("unknown", ["missing", "stale"])
def test_a_pod_without_fresh_metrics_is_not_preferred_over_busy_front_ends(unknown: str) -> None:
    """The gateway knows only its own front-end placements: a pod with unknown metrics may be
    decoding other gateways' clips, so it stays behind the known pods however busy they are."""
    s = build()
    eps = fleet(3, scraped_at=100.0)
    eps[2].metrics = None if unknown == "missing" else Metrics(scraped_at=0.0)
    for i in range(2):
        s.start(*_placed(s, req(f"v{i}", "q", clip(f"clip-{i}")), eps[i], 100.0))
    targets = set()
    for i in range(10):
        r = req(f"t{i}", "hello", views.audio(f"a{i}", 20.0))
        targets.add(s.schedule(r, eps, 100.0).target.name)
        p = predicted(r)
        assert p.frontend == pytest.approx((0.0, AUDIO_S))
        assert p.seconds[eps[2].name] > max(p.seconds[eps[0].name], p.seconds[eps[1].name])
    assert eps[2].name not in targets


def _placed(
    s: Scheduler, r: SchedulingRequest, target: EndpointState, now: float
) -> tuple[SchedulingRequest, Any, float]:
    """``r`` scheduled onto ``target`` alone (so the test chooses where the clip goes)."""
    result = s.schedule(r, [target], now)
    s.pre_request(r, result, now)
    return r, result, now


def test_the_fit_learns_the_engines_rates_not_the_front_end() -> None:
    """Every clip's observed TTFT is what was predicted, front end included. Were the front-end
    seconds left in the observation, the fit would price them into the engine's rates as well,
    and the prediction would grow by the decode with every clip."""
    s = build(learn=True, minSamples=5, priorSamples=0)
    eps = fleet(1)
    start = None
    for i in range(30):
        r = req(f"v{i}", "what happens here", clip(f"clip-{i}"))
        now = 10.0 * i
        send(s, r, eps, now)
        p = predicted(r).seconds[eps[0].name]
        start = p if start is None else start
        s.on_first_token(r.request_id, now + p)
        s.on_finished(r.request_id, now + p + 1.0)
    last = req("probe", "what happens here", clip("clip-probe"))
    s.schedule(last, eps, 1000.0)
    assert predicted(last).seconds[eps[0].name] == pytest.approx(start, rel=0.02)


def test_an_empty_front_end_table_turns_the_term_off() -> None:
    gaps = []
    for front in (FRONT, {}):
        s = build(frontEnd=front)
        eps = fleet(2)
        video = req("v", "q", clip("clip-1"))
        busy = send(s, video, eps, 0.0)
        assert (sum(predicted(video).frontend) > 0) is bool(front)
        voice = req("t", "hello", views.audio("a-1", 10.0))
        s.schedule(voice, eps, 0.1)
        p = predicted(voice)
        idle = next(e for e in eps if e is not busy)
        gaps.append(p.seconds[busy.name] - p.seconds[idle.name])  # the clip's GPU work, and ...
    assert gaps[0] - gaps[1] == pytest.approx(video_seconds(video) - 0.1)  # ... its decode left


@pytest.mark.parametrize(
    ("front", "message"),
    [
        ({"smell": {"load": {"itemSeconds": 1}}}, "unknown modality 'smell'"),
        ({"video": {"processor": {"tokenSeconds": -1}}}, "tokenSeconds must be >= 0"),
        ({"video": {"processor": {"perFrame": 1}}}, "perFrame"),
        ({"video": {"tokenSeconds": 1}}, "tokenSeconds"),
    ],
)
def test_bad_front_end_rates_are_config_errors(front: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        build(frontEnd=front)
