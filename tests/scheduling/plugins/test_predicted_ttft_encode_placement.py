"""``predicted-ttft-producer`` beside ``adaptive-encode-decider``: the serving pod's prediction is
of the placement the decider made. The producers price every candidate before the decider asks
where to encode, with the media as encoder outputs to receive (``encoderSecondsPerToken``: their
transfer, in examples/e-pd-adaptive.yaml); media then left on the serving pod are encoded there."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from mmgate.config import load_config
from mmgate.request.view import MediaAsset, RequestView
from mmgate.scheduling import EndpointState, Metrics, Scheduler, SchedulingRequest, build_scheduler
from mmgate.scheduling.encoder_assignment import LOCAL
from mmgate.scheduling.keys import ENCODE_CHOICE, PREDICTED_TTFT, TOKENIZED_PROMPT, EncodeChoice
from mmgate.scheduling.plugins.predicted_ttft_producer import PredictedTTFTProducer
from mmgate.scheduling.ttft import Vector
from support.processes import REPO
from support.scheduling import image
from support.views import view

EXAMPLE = REPO / "examples" / "e-pd-adaptive.yaml"
TRANSFER_S_PER_TOKEN = 5.0e-7  # the example's predicted-ttft-producer encoderSecondsPerToken


def build(producer: dict[str, Any] | None = None, **decider: Any) -> Scheduler:
    """examples/e-pd-adaptive.yaml with the producer's and the decider's parameters overridden;
    the decider without its TTFT SLO unless told (its priced costs decide: an idle PD pod keeps
    a thumbnail, where the SLO would send it to the tier it meets the SLO through)."""
    cfg = load_config(EXAMPLE)
    overrides = {
        "predicted-ttft-producer": producer or {},
        "adaptive-encode-decider": {"ttftSLOSeconds": 0, **decider},
    }
    for plugin in cfg.picker.plugins:
        if plugin.type in overrides:
            plugin.parameters = {**(plugin.parameters or {}), **overrides[plugin.type]}
    return build_scheduler(cfg.picker, mmgate=cfg.mmgate, seed=1)


def fleet(pd: Metrics | None = None) -> list[EndpointState]:
    return [
        EndpointState("10.0.3.0:8000", role="encode", metrics=Metrics()),
        EndpointState("10.0.3.1:8000", role="prefill-decode", metrics=pd or Metrics()),
    ]


def producer_of(s: Scheduler) -> PredictedTTFTProducer:
    found = s.plugins["predicted-ttft-producer"]
    assert isinstance(found, PredictedTTFTProducer)
    return found


def priced_alone(s: Scheduler, v: RequestView, eps: list[EndpointState]) -> tuple[float, int]:
    """What the producers predict for the PD pod before any decider asks (a request scheduled
    nowhere, so nothing is placed), and the request's media tokens."""
    r = SchedulingRequest(v, "priced-alone")
    r.now, r.staleness_s = 0.0, s.metrics_staleness_s
    for p in s.producers:
        p.produce(r, eps)
    info, tp = r.get(PREDICTED_TTFT), r.get(TOKENIZED_PROMPT)
    assert info is not None and tp is not None
    return info.seconds[eps[1].name], tp.media_tokens


def decided(s: Scheduler, v: RequestView, eps: list[EndpointState], rid: str) -> tuple[EncodeChoice, float]:
    r = SchedulingRequest(v, rid)
    result = s.schedule(r, eps, 0.0)
    assert result.primary.targets[0].name == eps[1].name
    choice, info = r.get(ENCODE_CHOICE), r.get(PREDICTED_TTFT)
    assert choice is not None and info is not None
    return choice, info.seconds[eps[1].name]


def photos(tag: str, n: int) -> list[MediaAsset]:
    return [image(f"{tag}{i}".ljust(32, "x"), 1536, 1536) for i in range(n)]


def test_media_left_on_the_serving_pod_are_priced_as_encoded_there() -> None:
    """An idle PD pod encodes a thumbnail sooner than a hop to the encode pod returns it: the
    decider keeps it local, and the prediction adds the encoding the transfer price left out."""
    s = build()
    eps = fleet()
    v = view("what is in this picture?", image("thumb".ljust(32, "x"), 448, 448))
    before, tokens = priced_alone(s, v, eps)
    choice, after = decided(s, v, eps, "light")
    assert choice.outcome == "local"
    local_s = choice.seconds[eps[1].name]
    assert local_s > 0
    assert after == pytest.approx(before - TRANSFER_S_PER_TOKEN * tokens + local_s)
    assert after > before


def test_media_sent_to_the_tier_keep_the_prediction_they_were_chosen_on() -> None:
    s = build()
    eps = fleet(Metrics(waiting=2, running=30))  # a busy PD pod: the photos go to the encode pod
    v = view("compare these", *photos("p", 3))
    before, _ = priced_alone(s, v, eps)
    choice, after = decided(s, v, eps, "heavy")
    assert choice.outcome == "tier"
    assert after == before


def test_the_static_local_policy_is_predicted_with_its_encoding_too() -> None:
    """``policy: local`` (nothing offloaded) on the same config: every request with media is
    encoded where it is served, so every prediction carries its encoding."""
    s = build(policy="local")
    eps = fleet()
    v = view("compare these", *photos("q", 2))
    before, tokens = priced_alone(s, v, eps)
    choice, after = decided(s, v, eps, "static-local")
    assert (choice.outcome, choice.reason) == ("local", "policy")
    assert after == pytest.approx(before - TRANSFER_S_PER_TOKEN * tokens + choice.seconds[eps[1].name])
    assert after - before > 0.1  # two 2,304-token photos at 3.4e-5 s a token


def test_the_fit_learns_from_a_local_request_without_its_local_encoding() -> None:
    """The decider priced the local encoding at its own rates: the fit is given the observed
    TTFT less those seconds, and the encoder term without those tokens, so what it learns of the
    pod's rates (prefill, received encoder outputs) is not inflated by encoding it did not price."""
    s = build({"learn": True, "minSamples": 1})
    eps = fleet()
    producer = producer_of(s)
    seen: list[tuple[Vector, float]] = []
    observe = producer.learner.observe

    def spy(endpoint: EndpointState, terms: Vector, ttft: float) -> None:
        seen.append((terms, ttft))
        observe(endpoint, terms, ttft)

    producer.learner.observe = spy  # type: ignore[method-assign,assignment]
    v = msgspec.structs.replace(
        view("what is in this picture?", image("t".ljust(32, "y"), 448, 448)), stream=True
    )
    r = SchedulingRequest(v, "learn")
    result = s.schedule(r, eps, 0.0)
    choice, info = r.get(ENCODE_CHOICE), r.get(PREDICTED_TTFT)
    assert choice is not None and choice.outcome == "local" and info is not None
    load, processing = info.frontend  # the API server's part, priced apart as ever (idle: no queue)
    s.pre_request(r, result, 0.0)
    s.start(r, result, 0.0)
    s.on_first_token(r.request_id, 0.5)
    ((terms, ttft),) = seen
    assert terms[2] == 0  # no encoder output received, none in flight ahead of it
    assert ttft == pytest.approx(0.5 - load - processing - choice.seconds[eps[1].name])


def test_a_split_corrects_only_the_items_left_on_the_serving_pod() -> None:
    """Of two photos, the decider keeps the first on the PD pod and sends the second to the
    encode pod: only the first is priced as encoded there; the second stays a transfer."""
    s = build()
    eps = fleet()
    pd = eps[1]
    r = SchedulingRequest(view("compare these", *photos("s", 2)), "split")
    r.now, r.staleness_s = 0.0, s.metrics_staleness_s
    for p in s.producers:
        p.produce(r, eps)
    info, tp = r.get(PREDICTED_TTFT), r.get(TOKENIZED_PROMPT)
    assert info is not None and tp is not None
    first, second = tp.media
    before = info.seconds[pd.name]
    plan = {first.identity: LOCAL, second.identity: eps[0].name}
    r.put(
        ENCODE_CHOICE,
        EncodeChoice("split", "cheaper-split", plan, 1.0, 0.5, {pd.name: 0.08, eps[0].name: 0.09}),
    )
    producer_of(s).stages_planned(r, pd)
    assert info.seconds[pd.name] == pytest.approx(before + 0.08 - TRANSFER_S_PER_TOKEN * first.length)
