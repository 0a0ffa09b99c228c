"""decode-slack-scorer: the PD-pod choice sees the stall booked on each pod's decodes."""

from __future__ import annotations

import pytest

from mmgate.config import load_config
from mmgate.scheduling import EndpointState, Metrics, Scheduler, SchedulingRequest, build_scheduler
from mmgate.scheduling.keys import DECODE_OUTLOOK
from mmgate.scheduling.plugins.decode_slack_scorer import DecodeSlackScorer
from support.processes import REPO
from support.views import view

CONFIG = REPO / "docs" / "benchmarks" / "disaggregation" / "e-pd-adaptive-slack.yaml"


def build() -> Scheduler:
    cfg = load_config(CONFIG)
    return build_scheduler(cfg.picker, mmgate=cfg.mmgate, seed=1)


def fleet() -> list[EndpointState]:
    roles = ("encode", "prefill-decode", "prefill-decode")
    return [EndpointState(f"10.0.3.{i}:8000", role=r, metrics=Metrics()) for i, r in enumerate(roles)]


def start(s: Scheduler, eps: list[EndpointState], rid: str, text: str, now: float) -> str:
    """Schedule and start one request on the pods given; the PD pod it went to."""
    req = SchedulingRequest(view(text), rid)
    result = s.schedule(req, eps, now)
    s.pre_request_before_send(req, result, now)
    s.start(req, result, now)
    s.pre_request_deferred(req, result, now)
    return result.target.name


def stalled_and_clean(s: Scheduler, eps: list[EndpointState]) -> None:
    """One request decoding on each PD pod since t=0; on the first, a long prompt's prefill ran
    by t=0.5: seconds of engine steps in its decode's first second, on course far past 50 ms a
    token. The second pod's decode has seen no stall."""
    enc, stalled, clean = eps
    assert start(s, [enc, stalled], "d1", "hello", 0.0) == stalled.name
    assert start(s, [enc, clean], "d2", "hello", 0.0) == clean.name
    s.on_first_token("d1", 0.0)
    s.on_first_token("d2", 0.0)
    start(s, [enc, stalled], "s", "word " * 80_000, 0.0)
    s.on_first_token("s", 0.5)
    s.on_finished("s", 0.5)


def test_the_pod_whose_decodes_have_more_slack_scores_higher_and_is_chosen() -> None:
    s = build()
    eps = fleet()
    stalled_and_clean(s, eps)
    req = SchedulingRequest(view("a question"), "r")
    result = s.schedule(req, eps, 1.0)
    assert result.target.name == eps[2].name
    scorer = s.plugins["decode-slack-scorer"]
    assert isinstance(scorer, DecodeSlackScorer)
    low, high = scorer.score(req, eps[1:])
    assert 0.0 <= low < high <= 1.0
    assert low == 0.0  # the stalled pod's decode is predicted past the SLO
    outlook = req.get(DECODE_OUTLOOK)
    assert outlook is not None
    worst = outlook.decode_tpot(eps[2], 1.0)
    assert worst is not None and high == pytest.approx(1.0 - worst / 0.05)


def test_a_pod_with_no_decode_scores_one_and_a_finished_decode_stops_counting() -> None:
    s = build()
    eps = fleet()
    stalled_and_clean(s, eps)
    req = SchedulingRequest(view("a question"), "r")
    s.schedule(req, eps, 1.0)
    scorer = s.plugins["decode-slack-scorer"]
    assert isinstance(scorer, DecodeSlackScorer)
    assert scorer.score(req, eps[1:])[0] == 0.0
    s.on_finished("d1", 0.9)
    req = SchedulingRequest(view("a question"), "r2")
    s.schedule(req, eps, 1.0)
    assert scorer.score(req, eps[1:])[0] == 1.0


def test_bad_slo_is_refused() -> None:
    cfg = load_config(CONFIG)
    for plugin in cfg.picker.plugins:
        if plugin.type == "decode-slack-scorer":
            plugin.parameters = {"tpotSLOSeconds": 0}
    with pytest.raises(ValueError, match="tpotSLOSeconds"):
        build_scheduler(cfg.picker, mmgate=cfg.mmgate, seed=1)
