"""The per-endpoint circuit breaker: a pod that answers its scrapes but fails its requests is
ejected, probed once when its ejection ends, and returns only when the probe succeeds."""

from __future__ import annotations

import time
from dataclasses import dataclass

from mmgate.control.circuit_breaker import Breaker, BreakerSettings, State
from support.probes import config
from support.stack import Stack, chat_body, stack


@dataclass(frozen=True)
class Ep:
    name: str


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_ejection_half_open_probe_and_back_off() -> None:
    clock = Clock()
    changes: list[tuple[str, State]] = []
    b = Breaker(BreakerSettings(3, 1.0, 5.0), clock=clock, on_change=lambda n, s: changes.append((n, s)))
    a, c = Ep("a"), Ep("c")
    b.failure("a")
    b.failure("a")
    b.success("a")  # a success resets the count: failures must be consecutive
    b.failure("a")
    b.failure("a")
    assert b.filter([a, c]) == [a, c]
    b.failure("a")
    assert b.state("a") is State.OPEN and b.filter([a, c]) == [c]
    assert b.filter([a]) == [a]  # panic mode: never refuse everything
    clock.t += 1.0
    assert b.state("a") is State.HALF_OPEN and b.filter([a, c]) == [a, c]
    b.begin("a")  # the one probe
    assert b.filter([a, c]) == [c]
    b.failure("a")  # bad probe: ejected again, twice as long
    clock.t += 1.5
    assert b.state("a") is State.OPEN
    clock.t += 0.5
    assert b.state("a") is State.HALF_OPEN
    b.begin("a")
    b.release("a")  # the probe ended without a verdict (client left): the slot is free again
    assert b.usable("a")
    b.begin("a")
    b.success("a")
    assert b.state("a") is State.CLOSED
    # back-off was reset: three failures eject for the base time again
    for _ in range(3):
        b.failure("a")
    clock.t += 1.0
    assert b.state("a") is State.HALF_OPEN
    assert [s for n, s in changes if n == "a"] == [
        State.OPEN, State.HALF_OPEN, State.OPEN, State.HALF_OPEN, State.CLOSED, State.OPEN, State.HALF_OPEN,
    ]  # fmt: skip


def test_the_ejection_time_is_capped_and_disabled_breakers_do_nothing() -> None:
    clock = Clock()
    b = Breaker(BreakerSettings(1, 1.0, 3.0), clock=clock)
    for expected in (1.0, 2.0, 3.0, 3.0):  # doubling, capped at max_ejection_s
        b.failure("a")  # (the first from closed, the rest as failed half-open probes)
        clock.t += expected - 0.01
        assert b.state("a") is State.OPEN
        clock.t += 0.02
        assert b.state("a") is State.HALF_OPEN
    off = Breaker(BreakerSettings(0), clock=clock)
    for _ in range(10):
        off.failure("a")
    assert off.usable("a")


async def attempts_on(s: Stack, endpoint: str) -> float:
    metrics = await (await s.session.get(s.url + "/metrics")).text()
    total = 0.0
    for line in metrics.splitlines():
        if line.startswith("mmgate_upstream_errors_total{") and f'endpoint="{endpoint}"' in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


class Shifted:
    """Monotonic time plus a shift the test moves forward: the gateway's ejections end when the
    test says, however slowly a loaded machine runs the requests in between."""

    def __init__(self) -> None:
        self.shift = 0.0

    def __call__(self) -> float:
        return time.monotonic() + self.shift


async def test_a_pod_failing_every_request_is_ejected_then_probed_back() -> None:
    # Ejections of an hour, doubling to two: only the test's clock shifts end them.
    breaker = {"consecutiveFailures": 3, "baseEjectionS": 3600.0, "maxEjectionS": 7200.0}
    clock = Shifted()
    async with stack(config(outlierDetection=breaker), pods=3, clock=clock) as s:
        sick_url = s.fleet.urls[0]
        sick = sick_url.removeprefix("http://")
        async with s.session.post(sick_url + "/admin/faults", json={"rate_500": 1.0}) as r:
            assert r.status == 200
        served = [await s.post(chat_body(s.model, f"sick {k}")) for k in range(30)]
        assert all(r.status == 200 and r.endpoint != sick for r in served)
        # Three failures ejected it; the other 27 requests never went near it.
        assert await attempts_on(s, sick) == 3
        metrics = await (await s.session.get(s.url + "/metrics")).text()
        assert f'mmgate_endpoint_circuit_open{{endpoint="{sick}"}} 1.0' in metrics
        assert f'mmgate_endpoint_ejections_total{{endpoint="{sick}"}} 1.0' in metrics
        # Still sick when the ejection ends: one probe fails, ejected again (for longer).
        clock.shift += 3600.0
        again = [await s.post(chat_body(s.model, f"probe {k}")) for k in range(6)]
        assert all(r.status == 200 for r in again)
        assert await attempts_on(s, sick) == 4
        metrics = await (await s.session.get(s.url + "/metrics")).text()
        assert f'mmgate_endpoint_ejections_total{{endpoint="{sick}"}} 2.0' in metrics
        # Healed: after the (doubled) ejection a probe succeeds and the pod takes traffic again.
        async with s.session.post(sick_url + "/admin/faults", json={"rate_500": 0.0}) as r:
            assert r.status == 200
        clock.shift += 3600.0
        still = await s.post(chat_body(s.model, "not yet"))
        assert still.status == 200 and still.endpoint != sick  # half the doubled ejection left
        clock.shift += 3600.0
        back = [await s.post(chat_body(s.model, f"healed {k}")) for k in range(9)]
        assert all(r.status == 200 for r in back)
        assert sum(r.endpoint == sick for r in back) >= 2
        metrics = await (await s.session.get(s.url + "/metrics")).text()
        assert f'mmgate_endpoint_circuit_open{{endpoint="{sick}"}} 0.0' in metrics


def test_filter_shortcut_agrees_with_the_per_endpoint_check() -> None:
    """While no endpoint is tripped, filter() skips the per-endpoint checks; a random history of
    failures, successes, probes, expiries and removals must never make the two disagree."""
    import random

    rng = random.Random(7)
    clock = Clock()
    b = Breaker(BreakerSettings(2, 1.0, 4.0), clock=clock)
    eps = [Ep(n) for n in "abcd"]
    for _ in range(3000):
        name = rng.choice("abcd")
        action = rng.random()
        if action < 0.4:
            b.failure(name)
        elif action < 0.6:
            b.success(name)
        elif action < 0.7:
            b.begin(name)
        elif action < 0.75:
            b.forget(name)
        else:
            clock.t += rng.choice((0.2, 1.5, 5.0))
        slow = [e for e in eps if b.usable(e.name)] or list(eps)
        assert b.filter(eps) == slow
        assert b.tripped == sum(1 for e in eps if b.state(e.name) is not State.CLOSED)
