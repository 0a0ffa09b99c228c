"""The online rate fit: converges on what the observations say, resists outliers, forgets, and
waits for enough samples before trusting an endpoint."""

from __future__ import annotations

import random

import pytest

from mmgate.scheduling import EndpointState
from mmgate.scheduling.ttft import RateLearner, Rates, RateSpec, RateTable

DEFAULTS = Rates(0.02, 1.0 / 10_000, 3e-5)


def learner(table: RateTable | None = None, **kwargs: float) -> RateLearner:
    t = table or RateTable(DEFAULTS)
    return RateLearner(DEFAULTS, t.configured, **kwargs)  # type: ignore[arg-type]


def observe(
    lr: RateLearner, ep: EndpointState, truth: Rates, n: int, rng: random.Random, noise: float = 0.05
) -> None:
    for _ in range(n):
        x = (1.0, float(rng.randint(50, 20_000)), float(rng.choice([0, 0, 880, 1760, 2640])), 0.0, 0.0, 0.0)
        lr.observe(ep, x, truth.seconds(x) * (1 + rng.gauss(0, noise)))


def close(a: float, b: float, rel: float) -> bool:
    return abs(a - b) <= rel * abs(b)


def test_learns_each_endpoints_own_rates() -> None:
    rng = random.Random(1)
    fast, slow = EndpointState("fast:1"), EndpointState("slow:1")
    truth_fast = Rates(0.03, 1 / 15_751, 2.5e-5)
    truth_slow = Rates(0.05, 1 / 5_000, 3e-4)
    lr = learner()
    for _ in range(20):
        observe(lr, fast, truth_fast, 20, rng)
        observe(lr, slow, truth_slow, 20, rng)
    f, s = lr.rates(fast), lr.rates(slow)
    assert close(f.prefill_s_per_token, truth_fast.prefill_s_per_token, 0.05)
    assert close(s.prefill_s_per_token, truth_slow.prefill_s_per_token, 0.05)
    assert close(s.encoder_s_per_token, truth_slow.encoder_s_per_token, 0.15)
    assert lr.learned("fast:1") and lr.learned("slow:1")


def test_prior_until_min_samples_then_the_fit() -> None:
    rng = random.Random(2)
    ep = EndpointState("a:1")
    lr = learner(min_samples=30)
    truth = Rates(0.1, 1 / 2_000, 1e-4)
    observe(lr, ep, truth, 29, rng)
    assert not lr.learned("a:1")
    # the pooled fit (every endpoint's observations) also waits for 30, so the defaults hold
    assert lr.rates(ep) == DEFAULTS
    observe(lr, ep, truth, 1, rng)
    assert lr.learned("a:1")
    # 30 noisy samples pin predictions down where they lie, if not every rate on its own
    for tokens, media in ((4000, 880), (10000, 0), (16000, 2640)):
        x = (1.0, float(tokens), float(media), 0.0, 0.0, 0.0)
        assert close(lr.rates(ep).seconds(x), truth.seconds(x), 0.1)


def test_a_new_endpoint_starts_from_the_pooled_fit() -> None:
    rng = random.Random(3)
    lr = learner()
    truth = Rates(0.04, 1 / 4_000, 1e-4)
    observe(lr, EndpointState("old:1"), truth, 200, rng)
    fresh = EndpointState("new:1")
    assert not lr.learned("new:1")
    assert close(lr.rates(fresh).prefill_s_per_token, truth.prefill_s_per_token, 0.1)


def test_configured_rates_are_the_prior_and_used_as_is_without_learning() -> None:
    table = RateTable(DEFAULTS, by_role={"decode": RateSpec(prefillTokensPerSecond=2_000)})
    ep = EndpointState("d:1", role="decode")
    off = learner(table, learn=False)
    observe(off, ep, Rates(1.0, 1e-3, 1e-3), 100, random.Random(4))
    assert off.rates(ep) == Rates(DEFAULTS.fixed_s, 1 / 2_000, DEFAULTS.encoder_s_per_token)
    on = learner(table)
    observe(on, ep, Rates(0.02, 1 / 8_000, 3e-5), 200, random.Random(4))
    assert close(on.rates(ep).prefill_s_per_token, 1 / 8_000, 0.2)  # the prior still pulls a little


def test_outliers_do_not_drag_the_rates() -> None:
    rng = random.Random(5)
    ep = EndpointState("a:1")
    truth = Rates(0.02, 1 / 10_000, 3e-5)
    lr = learner()
    for i in range(600):
        x = (1.0, float(rng.randint(50, 20_000)), 0.0, 0.0, 0.0, 0.0)
        y = truth.seconds(x)
        lr.observe(ep, x, y * 40 if i % 20 == 7 else y)  # 5% of requests hit a 40x stall
    assert close(lr.rates(ep).prefill_s_per_token, truth.prefill_s_per_token, 0.25)


def test_a_pod_that_slows_down_is_relearned() -> None:
    rng = random.Random(6)
    ep = EndpointState("a:1")
    lr = learner(half_life_samples=64)
    observe(lr, ep, Rates(0.02, 1 / 10_000, 3e-5), 400, rng)
    slower = Rates(0.02, 1 / 2_500, 3e-5)
    observe(lr, ep, slower, 400, rng)
    assert close(lr.rates(ep).prefill_s_per_token, slower.prefill_s_per_token, 0.2)


def test_rates_stay_non_negative_on_degenerate_data() -> None:
    ep = EndpointState("a:1")
    lr = learner(min_samples=5)
    for i in range(50):  # TTFT falls as tokens grow: an unconstrained fit would go negative
        x = (1.0, float(1000 + i * 100), 0.0, 0.0, 0.0, 0.0)
        lr.observe(ep, x, 1.0 - i * 0.01)
    r = lr.rates(ep)
    assert min(r.vector) >= 0.0


def test_forgetting_an_endpoint_drops_its_fit() -> None:
    rng = random.Random(7)
    ep = EndpointState("a:1")
    lr = learner()
    observe(lr, ep, Rates(0.5, 1e-3, 0.0), 100, rng)
    assert lr.learned("a:1")
    lr.forget("a:1")
    assert not lr.learned("a:1") and lr.samples("a:1") == 0.0


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"min_samples": 0}, "minSamples"),
        ({"half_life_samples": 0}, "halfLifeSamples"),
        ({"half_life_samples": 4, "min_samples": 20}, "forgets too fast"),
        ({"prior_samples": -1}, "priorSamples"),
    ],
)
def test_settings_that_cannot_work_are_refused(kwargs: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        learner(None, **kwargs)


def test_rate_table_resolves_each_rate_from_the_most_specific_level() -> None:
    table = RateTable(
        DEFAULTS,
        by_endpoint={"a:1": RateSpec(fixedSeconds=0.5)},
        by_label={"gpu=rtx4060": RateSpec(encoderSecondsPerToken=3e-4)},
        by_role={"decode": RateSpec(prefillTokensPerSecond=5_000, encoderSecondsPerToken=1e-5)},
    )
    ep = EndpointState("a:1", role="decode", labels={"gpu": "rtx4060"})
    rates, explicit = table.configured(ep)
    assert rates == Rates(0.5, 1 / 5_000, 3e-4) and explicit == (True, True, True, False, False, True)
    other, explicit = table.configured(EndpointState("b:1"))
    assert other == DEFAULTS and not any(explicit)
    with pytest.raises(ValueError, match="label=value"):
        RateTable(DEFAULTS, by_label={"gpu": RateSpec()})


def test_believed_hits_that_are_not_there_are_priced_in() -> None:
    """The gateway believes an image is in a pod's encoder cache, but the pod evicted it 70% of
    the time: a believed hit costs 0.7 of a miss. The fit learns that from the TTFTs."""
    rng = random.Random(8)
    ep = EndpointState("a:1")
    lr = learner()
    encode = 6e-4  # s per media token
    for _ in range(400):
        media = float(rng.choice([880, 1760]))
        believed_hit = rng.random() < 0.5
        x = (
            1.0,
            float(rng.randint(100, 3000)),
            0.0 if believed_hit else media,
            media if believed_hit else 0.0,
            0.0,
            0.0,
        )
        really_encoded = not believed_hit or rng.random() < 0.7
        y = 0.02 + x[1] / 10_000 + (media * encode if really_encoded else 0.0)
        lr.observe(ep, x, y)
    r = lr.rates(ep)
    assert close(r.encoder_s_per_token, encode, 0.15)
    assert close(r.encoder_hit_s_per_token, 0.7 * encode, 0.3)  # the hit-or-miss coin is noisy


def test_a_decision_reads_the_rates_without_solving() -> None:
    """The solve happens in the first-token hook, once per observation after the floor; reading
    the rates (what every decision does for every candidate) never solves."""
    rng = random.Random(8)
    ep = EndpointState("a:1")
    lr = learner()
    observe(lr, ep, Rates(0.03, 1 / 12_000, 4e-5), 100, rng)
    assert lr.solves == 100 - 20 + 1  # one per observation once trusted, none before
    first = lr.rates(ep)
    for _ in range(50):
        assert lr.rates(ep) is first
    assert lr.solves == 81


def test_an_endpoint_on_its_prior_follows_the_pooled_fit_without_a_decision_asking() -> None:
    """When the pooled fit solves, the endpoints still on their prior get the new prior in the
    learner's current mapping there, in the first-token hook: the next decision reads it with
    one lookup instead of re-pricing the endpoint itself."""
    rng = random.Random(9)
    lr = learner()
    quiet = EndpointState("quiet:1")
    before = lr.rates(quiet)  # nothing observed yet: the defaults
    assert before == DEFAULTS and lr.current["quiet:1"] is before
    truth = Rates(0.04, 1 / 4_000, 1e-4)
    observe(lr, EndpointState("busy:1"), truth, 40, rng)  # the pooled fit solves at 20 and 32
    now = lr.current["quiet:1"]
    assert now != before
    assert close(now.prefill_s_per_token, truth.prefill_s_per_token, 0.1)
    assert lr.rates(quiet) is now
    assert not lr.learned("quiet:1")
