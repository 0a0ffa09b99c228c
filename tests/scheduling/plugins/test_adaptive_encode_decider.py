"""``adaptive-encode-decider``: each request with media encoded on the tier while its TTFT SLO
allows, else where its predicted cost is lowest."""

from __future__ import annotations

from typing import Any

import pytest

from mmgate.config import load_config
from mmgate.request.view import MediaAsset
from mmgate.scheduling import EndpointState, Metrics, Scheduler, SchedulingRequest, build_scheduler
from mmgate.scheduling.keys import ENCODE_CHOICE, EncodeChoice
from mmgate.scheduling.plugins.adaptive_encode_decider import AdaptiveEncodeDecider
from support.processes import REPO
from support.scheduling import image
from support.views import view

EXAMPLE = REPO / "examples" / "e-pd-adaptive.yaml"
ENCODERS = "x-encoder-hosts-ports"


def build(**params: Any) -> Scheduler:
    """examples/e-pd-adaptive.yaml with the decider's parameters overridden."""
    cfg = load_config(EXAMPLE)
    for plugin in cfg.picker.plugins:
        if plugin.type == "adaptive-encode-decider":
            plugin.parameters = {**(plugin.parameters or {}), **params}
    return build_scheduler(cfg.picker, mmgate=cfg.mmgate, seed=1)


def fleet(*roles: str) -> list[EndpointState]:
    return [EndpointState(f"10.0.2.{i}:8000", role=r, metrics=Metrics()) for i, r in enumerate(roles)]


def decider(s: Scheduler) -> AdaptiveEncodeDecider:
    found = s.plugins["adaptive-encode-decider"]
    assert isinstance(found, AdaptiveEncodeDecider)
    return found


def send(
    s: Scheduler,
    eps: list[EndpointState],
    rid: str,
    *parts: str | MediaAsset,
    finish: bool = True,
    headers: dict[str, str] | None = None,
    now: float = 0.0,
) -> tuple[EncodeChoice | None, list[str]]:
    """Schedule and start one request (its index updates run); finished at once unless told not."""
    req = SchedulingRequest(view(*parts), rid, headers)
    result = s.schedule(req, eps, now)
    s.pre_request_before_send(req, result, now)
    s.start(req, result, now)
    s.pre_request_deferred(req, result, now)
    if finish:
        s.on_finished(rid, now)
    header = (req.upstream_headers or {}).get(ENCODERS)
    return req.get(ENCODE_CHOICE), header.split(",") if header else []


def photos(tag: str, n: int) -> list[MediaAsset]:
    return [image(f"{tag}{i}".ljust(32, "x"), 1536, 1536) for i in range(n)]


L4 = {"encode": {"encoderSecondsPerToken": 2.8e-4, "itemSeconds": 0.02}}
"""An encode tier of a card eight times slower than the PD pods' (examples' L4 estimate)."""


def test_a_tier_within_the_slo_takes_the_media_though_the_pd_pod_would_encode_faster() -> None:
    """The tier's encoders serve nobody else; the PD pod's GPU stalls its decodes for a local
    encode. With a TTFT SLO the tier takes every request it keeps within it; priced on time
    alone (no SLO) an idle PD pod's faster encoder wins, and its decodes pay."""
    eps = fleet("encode", "prefill-decode")
    choice, header = send(build(byRole=L4), eps, "r", "describe", *photos("l", 2))
    assert choice is not None and (choice.outcome, choice.reason) == ("tier", "slo-tier")
    assert choice.local_cost < choice.tier_cost and header == [eps[0].name, eps[0].name]
    choice, header = send(build(byRole=L4, ttftSLOSeconds=0), eps, "r", "describe", *photos("l", 2))
    assert choice is not None and (choice.outcome, choice.reason) == ("local", "cheaper-local")
    assert header == []


def test_the_request_header_sets_its_own_slo() -> None:
    """``x-slo-ttft-ms`` (llm-d's predicted-latency header) overrides ``ttftSLOSeconds``: a photo
    takes about 0.65 s on the slow tier, so a 300 ms SLO keeps it on the PD pod."""
    s = build(byRole=L4)
    eps = fleet("encode", "prefill-decode")
    choice, header = send(s, eps, "r", "describe", *photos("m", 1), headers={"x-slo-ttft-ms": "300"})
    assert choice is not None and (choice.outcome, choice.reason) == ("local", "slo-local")
    assert header == []
    for bad in ("abc", "-5", "inf"):  # not a usable SLO: the configured one
        choice, _ = send(s, eps, f"b{bad}", "describe", *photos(bad, 1), headers={"x-slo-ttft-ms": bad})
        assert choice is not None and choice.outcome == "tier"


def test_past_the_slo_the_tier_overflows_to_the_pd_pod() -> None:
    """Heavy requests queue on the one encoder while each still meets its TTFT; the first that
    would not is encoded where it is served; once the legs end, media go to the tier again."""
    s = build(split=False)
    eps = fleet("encode", "prefill-decode")
    outcomes = []
    for i in range(20):
        choice, header = send(s, eps, f"o{i}", "describe", *photos(f"o{i}", 4), finish=False)
        assert choice is not None
        outcomes.append((choice.outcome, choice.reason))
        if choice.outcome == "local":
            assert header == []
            break
    assert outcomes[0] == ("tier", "slo-tier") and outcomes[-1] == ("local", "slo-local")
    assert len(outcomes) > 3  # the tier took several before its queue reached the SLO
    assert 1.0 < decider(s).backlog(eps[0].name) < 2.0
    for i in range(len(outcomes)):
        s.on_stage_done(f"o{i}", eps[0].name, 1.0)
    again, _ = send(s, eps, "after", "describe", *photos("p", 4))
    assert again is not None and (again.outcome, again.reason) == ("tier", "slo-tier")


TPOT = {"tpotSLOSeconds": 0.05, "decodeStepSeconds": 0.014, "outputTokens": 200}
"""The benchmark's TPOT SLO and the H200 pods' decode step (the examples' values)."""
TIGHT = {"x-slo-ttft-ms": "300"}
"""A TTFT SLO a photo on the slow tier misses (about 0.65 s) and on the PD pod meets."""


def decoding(s: Scheduler, eps: list[EndpointState], stall: bool) -> None:
    """A request decoding on the PD pod since t=0 and, with ``stall``, a long prompt whose
    prefill ran there by t=0.5 (its first and only token): seconds of engine steps in the
    decode's first second, so the decode is on course for far more than 50 ms a token."""
    send(s, eps, "d", "hello", finish=False)
    s.on_first_token("d", 0.0)
    if stall:
        send(s, eps, "s", "word " * 80_000, finish=False)
        s.on_first_token("s", 0.5)
        s.on_finished("s", 0.5)


@pytest.mark.parametrize(
    ("stall", "outcome", "reason"), [(True, "tier", "tpot-tier"), (False, "local", "slo-local")]
)
def test_a_decode_bound_pd_pod_sends_the_media_to_the_tier_one_with_headroom_keeps_them(
    stall: bool, outcome: str, reason: str
) -> None:
    """The same TTFT picture (the slow tier misses the request's SLO, the PD pod meets it); a
    local encode would stall every decode on the PD pod. When a decode there is already on
    course past its TPOT SLO the media go to the tier; with headroom the PD pod keeps them."""
    s = build(byRole=L4, **TPOT)
    eps = fleet("encode", "prefill-decode")
    decoding(s, eps, stall)
    choice, header = send(s, eps, "r", "describe", *photos("t", 1), headers=TIGHT, now=1.0)
    assert choice is not None and (choice.outcome, choice.reason) == (outcome, reason)
    assert header == ([eps[0].name] if outcome == "tier" else [])
    # the TTFT picture is the same either way: the predicted TTFT via the PD pod and via the tier
    assert 0.0 < choice.local_cost < 0.3 < choice.tier_cost


def test_without_a_tpot_slo_the_decodes_are_not_asked() -> None:
    """No ``tpotSLOSeconds`` and no ``x-slo-tpot-ms`` on the decoding requests: the TTFT rule
    alone decides, as before; a decode's own header gives it an SLO."""
    s = build(byRole=L4)
    eps = fleet("encode", "prefill-decode")
    decoding(s, eps, stall=True)
    choice, _ = send(s, eps, "r", "describe", *photos("u", 1), headers=TIGHT, now=1.0)
    assert choice is not None and (choice.outcome, choice.reason) == ("local", "slo-local")
    s = build(byRole=L4)
    send(s, eps, "d", "hello", finish=False, headers={"x-slo-tpot-ms": "50"})
    s.on_first_token("d", 0.0)
    send(s, eps, "s", "word " * 80_000, finish=False)
    s.on_first_token("s", 0.5)
    s.on_finished("s", 0.5)
    choice, _ = send(s, eps, "r", "describe", *photos("v", 1), headers=TIGHT, now=1.0)
    assert choice is not None and (choice.outcome, choice.reason) == ("tier", "tpot-tier")


def test_a_finished_decode_no_longer_binds_the_pd_pod() -> None:
    s = build(byRole=L4, **TPOT)
    eps = fleet("encode", "prefill-decode")
    decoding(s, eps, stall=True)
    s.on_finished("d", 0.9)
    choice, _ = send(s, eps, "r", "describe", *photos("w", 1), headers=TIGHT, now=1.0)
    assert choice is not None and (choice.outcome, choice.reason) == ("local", "slo-local")


def test_a_busy_pd_pod_sends_the_media_to_an_idle_tier() -> None:
    s = build(ttftSLOSeconds=0)
    eps = fleet("encode", "prefill-decode")
    eps[1].metrics = Metrics(waiting=3, running=20)  # its encoder would stall 23 requests
    choice, header = send(s, eps, "r", "describe", *photos("a", 2))
    assert choice is not None and choice.outcome == "tier" and choice.reason == "cheaper-tier"
    assert choice.tier_cost < choice.local_cost
    assert header == [eps[0].name, eps[0].name]


def test_a_fast_tier_wins_over_an_idle_pd_pod() -> None:
    """Nothing shares the PD pod's GPU, but its encoder is ten times slower than the tier's."""
    s = build(
        byRole={"prefill-decode": {"encoderSecondsPerToken": 3.0e-4}, "encode": {"itemSeconds": 0.0}},
        ttftSLOSeconds=0,
    )
    eps = fleet("encode", "prefill-decode")
    choice, header = send(s, eps, "r", "describe", *photos("b", 1))
    assert choice is not None and choice.outcome == "tier"
    assert header == [eps[0].name]


def test_a_queued_tier_leaves_the_media_on_the_pd_pod() -> None:
    """Without an SLO: heavy requests queue on the one encoder until the next one is cheaper
    encoded where it is served; once the tier's legs end, media go to the tier again."""
    s = build(ttftSLOSeconds=0)
    eps = fleet("encode", "prefill-decode")
    eps[1].metrics = Metrics(waiting=0, running=10)
    outcomes = []
    for i in range(20):
        choice, header = send(s, eps, f"q{i}", "describe", *photos(f"q{i}", 4), finish=False)
        assert choice is not None
        outcomes.append(choice.outcome)
        if choice.outcome == "local":
            assert choice.reason == "cheaper-local" and choice.local_cost < choice.tier_cost
            assert header == []  # no encode stage: the PD pod encodes them
            break
    assert outcomes[0] == "tier" and outcomes[-1] == "local"
    assert decider(s).backlog(eps[0].name) > 0.3  # the queued legs' encoder seconds
    for i in range(len(outcomes)):  # every leg ends
        s.on_stage_done(f"q{i}", eps[0].name, 1.0)
    assert decider(s).backlog(eps[0].name) == 0.0
    again, _ = send(s, eps, "after", "describe", *photos("e", 4))
    assert again is not None and again.outcome == "tier"


@pytest.mark.parametrize("slo", [2.0, 0.0])
def test_items_the_pd_pod_holds_stay_local(slo: float) -> None:
    s = build(ttftSLOSeconds=slo)
    eps = fleet("encode", "prefill-decode")
    eps[1].metrics = Metrics(waiting=0, running=0)
    held = photos("f", 1)
    eps[0].metrics = Metrics(waiting=50)  # a scraped queue: the first request stays local
    choice, _ = send(s, eps, "seed", "describe", *held)
    assert choice is not None and choice.outcome == "local"
    eps[0].metrics = Metrics(waiting=0)
    eps[1].metrics = Metrics(waiting=2, running=20)  # now the tier would win for cold media
    again, header = send(s, eps, "again", "describe again", *held)
    assert again is not None and (again.outcome, again.reason) == ("local", "cached-local")
    assert header == []
    # One held item and one cold one: split, the held one named local in the header.
    split, header = send(s, eps, "split", "both", *held, *photos("g", 1))
    assert split is not None and split.outcome == "split"
    assert header == ["local", eps[0].name]


def test_a_text_request_never_reaches_the_tier() -> None:
    s = build()
    eps = fleet("encode", "prefill-decode")
    eps[1].metrics = Metrics(waiting=5, running=30)
    choice, header = send(s, eps, "t", "just text")
    assert choice is None and header == []


def test_cold_items_follow_the_encoder_that_holds_them() -> None:
    s = build()
    eps = fleet("encode", "encode", "prefill-decode")
    eps[2].metrics = Metrics(waiting=3, running=20)
    items = photos("h", 2)
    _, first = send(s, eps, "one", "describe", *items)
    assert sorted(first) == sorted([eps[0].name, eps[1].name])  # spread: they encode in parallel
    _, again = send(s, eps, "two", "again", items[1], items[0])
    assert again == [first[1], first[0]]  # each where it was encoded


@pytest.mark.parametrize(("policy", "outcome"), [("tier", "tier"), ("local", "local")])
def test_the_static_policies_decide_the_same_way_every_time(policy: str, outcome: str) -> None:
    s = build(policy=policy)
    eps = fleet("encode", "prefill-decode")
    for i, (waiting, running) in enumerate(((0, 0), (5, 40))):
        eps[1].metrics = Metrics(waiting=waiting, running=running)
        choice, _ = send(s, eps, f"p{i}", "describe", *photos(f"p{i}", 2))
        assert choice is not None and (choice.outcome, choice.reason) == (outcome, "policy")


def test_each_pod_is_priced_at_its_own_rate() -> None:
    s = build(
        byEndpoint={"10.0.2.0:8000": {"encoderSecondsPerToken": 1.0e-3}},
        byLabel={"accelerator=l4": {"encoderSecondsPerToken": 2.0e-4, "itemSeconds": 0.02}},
    )
    d = decider(s)
    slow = EndpointState("10.0.2.0:8000", role="encode")
    card = EndpointState("10.0.2.1:8000", role="encode", labels={"accelerator": "l4"})
    pd = EndpointState("10.0.2.2:8000", role="prefill-decode")
    assert d.rate(slow) == (1.0e-3, 0.015)  # its own per-token rate, its role's per item
    assert d.rate(card) == (2.0e-4, 0.02)
    assert d.rate(pd) == (3.4e-5, 0.003)  # the example's defaults


def test_bad_parameters_are_refused() -> None:
    with pytest.raises(ValueError, match="sharedWeight"):
        build(sharedWeight=-1)
    with pytest.raises(ValueError, match="ttftSLOSeconds"):
        build(ttftSLOSeconds=-1)
    with pytest.raises(ValueError, match="tpotSLOSeconds"):
        build(tpotSLOSeconds=-0.05)
    with pytest.raises(ValueError, match="decodeStepSeconds"):
        build(decodeStepSeconds=0)
    with pytest.raises(ValueError, match="label=value"):
        build(byLabel={"l4": {"itemSeconds": 0.1}})


def test_the_tier_signals_rise_when_encoder_work_queues_and_fall_when_it_drains() -> None:
    s = build(sizing={"targetSeconds": 0.25})
    eps = fleet("encode", "encode", "prefill-decode")
    eps[2].metrics = Metrics(waiting=2, running=30)  # a busy PD pod: media go to the tier
    d = decider(s)

    def encode_tier() -> tuple[float, int]:
        (enc,) = [t for t in d.tier_demand() if t.role == "encode"]
        return enc.encoder_seconds, enc.desired_replicas

    send(s, eps, "idle", "hello")  # the decider sees the fleet
    assert encode_tier() == (0.0, 1)
    for i in range(4):
        choice, _ = send(s, eps, f"w{i}", "describe", *photos(f"w{i}", 2), finish=False)
        assert choice is not None and choice.outcome == "tier"
    queued, wanted = encode_tier()
    assert queued > 0.5 and wanted >= 3  # about 0.2 s a request on 0.25 s a pod
    (pd,) = [t for t in d.tier_demand() if t.role == "prefill-decode"]
    assert pd.prefill_tokens > 0 and pd.requests == 4
    for i in range(4):
        s.on_stage_done(f"w{i}", eps[0].name, 1.0)
        s.on_stage_done(f"w{i}", eps[1].name, 1.0)
    assert encode_tier() == (0.0, 1)  # drained
    for i in range(4):
        s.on_finished(f"w{i}", 2.0)
    (pd,) = [t for t in d.tier_demand() if t.role == "prefill-decode"]
    assert (pd.prefill_tokens, pd.requests, pd.desired_replicas) == (0, 0, 1)
