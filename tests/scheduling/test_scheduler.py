"""The framework: default injection, score arithmetic, tie-breaks, lifecycle and removal hooks."""

from __future__ import annotations

from collections import Counter
from typing import Any, ClassVar

import pytest

from mmgate.config import ConfigError, parse_config
from mmgate.scheduling import (
    EndpointState,
    Metrics,
    NoEndpointsError,
    SchedulingRequest,
    Scorer,
    build_scheduler,
    builtin_registry,
    plugin_types,
)
from mmgate.scheduling.contracts import NoParams
from mmgate.scheduling.plugins.max_score_picker import MaxScorePicker
from mmgate.scheduling.plugins.single_profile_handler import SingleProfileHandler
from support.scheduling import endpoints, request, scheduler


class FixedScorer(Scorer[NoParams]):
    """Scores from a table keyed by endpoint name (test only)."""

    type_name = "test-fixed-scorer"
    table: ClassVar[dict[str, float]] = {}

    def score(self, request: SchedulingRequest, endpoints: list[EndpointState]) -> list[float]:
        return [self.table.get(e.name, 0.0) for e in endpoints]


def test_defaults_are_injected() -> None:
    s = scheduler([{"type": "queue-scorer"}])
    assert list(s.profiles) == ["default"]
    profile = s.profiles["default"]
    assert isinstance(profile.picker, MaxScorePicker)
    assert isinstance(s.handler, SingleProfileHandler)
    assert [ws.weight for ws in profile.scorers] == [1.0]


def test_scores_are_clamped_then_weighted_and_summed() -> None:
    FixedScorer.table = {"10.0.0.0:8000": 7.0, "10.0.0.1:8000": -3.0, "10.0.0.2:8000": float("nan")}
    s = scheduler(
        [{"type": "test-fixed-scorer"}, {"type": "queue-scorer"}],
        [{"pluginRef": "test-fixed-scorer", "weight": 3}, {"pluginRef": "queue-scorer", "weight": 0.5}],
        registry=builtin_registry().with_plugins(FixedScorer),
    )
    eps = endpoints(3, waiting=0)
    result = s.schedule(request(debug=True), eps, 0.0)
    # fixed: clamp(7)=1 → 3.0, clamp(-3)=0, NaN → 0; queue: all equal → 1.0 × 0.5
    assert result.primary.scores == [3.5, 0.5, 0.5]
    assert result.target is eps[0]
    assert result.primary.by_scorer is not None
    assert result.primary.by_scorer["test-fixed-scorer"][0] == 7.0


@pytest.mark.parametrize("n", [1, 3, 16, 17, 40])
def test_small_and_large_fleets_sum_scores_alike(n: int) -> None:
    # Profile.run sums with plain loops for small fleets and comprehensions for large ones: both
    # must clamp, weight and add in scorer order to the same floats.
    raw = [7.0, -3.0, float("nan"), 0.1, 0.7, 0.3, 1.0, 0.0]
    eps = endpoints(n, waiting=0)
    FixedScorer.table = {e.name: raw[i % len(raw)] for i, e in enumerate(eps)}
    s = scheduler(
        [{"type": "test-fixed-scorer"}, {"type": "queue-scorer"}],
        [
            {"pluginRef": "test-fixed-scorer", "weight": 0.3},
            {"pluginRef": "queue-scorer", "weight": 0.7},
            {"pluginRef": "test-fixed-scorer", "weight": 1.1},
        ],
        registry=builtin_registry().with_plugins(FixedScorer),
    )
    clamped = [min(max(raw[i % len(raw)], 0.0), 1.0) if raw[i % len(raw)] > 0 else 0.0 for i in range(n)]
    want = [((0.0 + c * 0.3) + 1.0 * 0.7) + c * 1.1 for c in clamped]
    assert s.schedule(request(), eps, 0.0).primary.scores == want


def test_ties_are_broken_at_random_and_reproducibly() -> None:
    eps = endpoints(4, waiting=0)

    def picks(seed: int) -> list[str]:
        s = scheduler([{"type": "queue-scorer"}], seed=seed)
        return [s.schedule(request(), eps, 0.0).target.name for _ in range(400)]

    first = picks(7)
    assert first == picks(7)
    counts = Counter(first)
    assert len(counts) == 4
    assert min(counts.values()) > 60  # roughly uniform: 100 expected each


def test_no_endpoints_raises() -> None:
    s = scheduler([{"type": "queue-scorer"}])
    with pytest.raises(NoEndpointsError):
        s.schedule(request(), [], 0.0)


def test_stale_metrics_are_not_trusted() -> None:
    doc = {"plugins": [{"type": "queue-scorer"}], "mmgate": {"metricsStalenessMs": 1000}}
    cfg = parse_config(doc)
    s = build_scheduler(cfg.picker, mmgate=cfg.mmgate, seed=1)
    fresh_busy = EndpointState("a:1", metrics=Metrics(waiting=5, scraped_at=10.0))
    stale_idle = EndpointState("b:1", metrics=Metrics(waiting=0, scraped_at=5.0))
    never = EndpointState("c:1")
    result = s.schedule(request(debug=True), [fresh_busy, stale_idle, never], now=10.5)
    assert result.target is fresh_busy
    assert result.primary.scores == [1.0, 0.0, 0.0]
    assert stale_idle.metrics_age(10.5) == 5.5
    assert never.metrics_age(10.5) is None


def test_lifecycle_counts_requests_and_is_idempotent() -> None:
    s = scheduler([{"type": "queue-scorer"}])
    eps = endpoints(2)
    req = request(rid="x")
    result = s.schedule(req, eps, 0.0)
    s.on_started(req, result.target, 0.0)
    assert result.target.inflight.requests == 1
    assert s.active_requests == 1
    s.on_first_token("x", 0.1)
    s.on_finished("x", 0.2)
    s.on_finished("x", 0.3)  # a second end is ignored
    s.on_failed("unknown", 0.3)
    assert result.target.inflight.requests == 0
    assert s.active_requests == 0


def test_retry_moves_the_request() -> None:
    s = scheduler([{"type": "queue-scorer"}])
    eps = endpoints(2)
    req = request(rid="y")
    result = s.schedule(req, eps, 0.0)
    first, second = result.primary.ranked()
    s.on_started(req, first, 0.0)
    s.on_failed("y", 0.01)
    s.on_started(req, second, 0.01)
    assert (first.inflight.requests, second.inflight.requests) == (0, 1)


def test_profile_without_picker_and_explicit_picker() -> None:
    s = scheduler(
        [{"type": "queue-scorer"}, {"type": "random-picker", "parameters": {"maxNumOfEndpoints": 2}}],
        [{"pluginRef": "queue-scorer"}, {"pluginRef": "random-picker"}],
    )
    result = s.schedule(request(), endpoints(3), 0.0)
    assert len(result.primary.targets) == 2
    assert len(set(result.primary.targets)) == 2


def test_two_pickers_in_one_profile_is_an_error() -> None:
    with pytest.raises(ConfigError, match="two pickers"):
        scheduler(
            [{"type": "random-picker"}, {"type": "max-score-picker"}],
            [{"pluginRef": "random-picker"}, {"pluginRef": "max-score-picker"}],
        )


def test_registry_lists_llm_d_names() -> None:
    names = plugin_types()
    for expected in (
        "max-score-picker",
        "random-picker",
        "weighted-random-picker",
        "round-robin-picker",
        "queue-scorer",
        "kv-cache-utilization-scorer",
        "load-aware-scorer",
        "single-profile-handler",
    ):
        assert expected in names


def test_sweep_releases_forgotten_requests() -> None:
    s = scheduler([{"type": "token-load-scorer"}])
    ep = endpoints(1)[0]
    old, new = request(rid="old"), request(rid="new")
    for req, t in ((old, 0.0), (new, 50.0)):
        s.on_started(req, s.schedule(req, [ep], t).target, t)
    assert ep.inflight.requests == 2 and ep.inflight.tokens > 0
    assert s.sweep(now=100.0, older_than_s=60.0) == 1
    assert ep.inflight.requests == 1 and s.active_requests == 1


class LoopingHandler(SingleProfileHandler):
    """Always asks for its profile again (test only)."""

    type_name = "test-looping-handler"

    def pick_profiles(self, request: Any, profiles: Any, results: Any) -> list[str]:
        return list(profiles)


def test_a_handler_that_never_stops_is_caught() -> None:
    s = scheduler(
        [{"type": "queue-scorer"}, {"type": "test-looping-handler"}],
        registry=builtin_registry().with_plugins(LoopingHandler),
    )
    with pytest.raises(RuntimeError, match="never stopped"):
        s.schedule(request(), endpoints(2), 0.0)


class ShortScorer(Scorer[NoParams]):
    """One score too few (test only)."""

    type_name = "test-short-scorer"

    def score(self, request: SchedulingRequest, endpoints: list[EndpointState]) -> list[float]:
        return [1.0] * (len(endpoints) - 1)


def test_a_scorer_that_skips_an_endpoint_is_an_error_not_a_silent_zero() -> None:
    s = scheduler([{"type": "test-short-scorer"}], registry=builtin_registry().with_plugins(ShortScorer))
    with pytest.raises(ValueError, match="'test-short-scorer' gave 2 scores for 3 endpoints"):
        s.schedule(request(), endpoints(3), 0.0)
