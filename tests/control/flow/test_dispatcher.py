"""The flow dispatcher on a one-pod virtual fleet: priority order, bounds in requests and bytes,
shedding, eviction, TTL, withdrawal, and release the moment the pod has room."""

from __future__ import annotations

from mmgate.control.flow.dispatcher import BandPlan, DispatcherLimits
from mmgate.control.flow.policies import GlobalStrict, VirtualCost
from mmgate.control.flow.queues import BandLimits
from support.flow import OnePod, plan


def test_held_requests_go_by_priority_then_arrival() -> None:
    pod = OnePod(plan(GlobalStrict))
    pod.send("first", "t", 1.0)  # runs at once
    pod.send("low", "t", 1.0, priority=0)
    pod.send("high-1", "u", 1.0, priority=10)
    pod.send("mid", "v", 1.0, priority=5)
    pod.send("high-2", "t", 1.0, priority=10)
    assert pod.order == ["first"]
    pod.run(until=10.0)
    assert pod.order == ["first", "high-1", "high-2", "mid", "low"]


def test_a_sheddable_request_is_refused_when_saturated_and_served_when_not() -> None:
    pod = OnePod(plan(GlobalStrict))
    pod.send("batch-idle", "t", 1.0, priority=-1)  # room: served
    pod.send("critical", "t", 1.0, priority=10)  # held
    pod.send("batch-busy", "t", 1.0, priority=-1)
    assert pod.refused == {"batch-busy": "shed"}
    pod.run(until=5.0)
    assert pod.order == ["batch-idle", "critical"]


def test_bounds_in_requests_and_bytes_refuse_with_their_reasons() -> None:
    limits = DispatcherLimits(max_requests=3, max_bytes=1000)
    pod = OnePod(plan(GlobalStrict, max_requests_per_flow=2), limits=limits)
    pod.send("running", "a", 1.0, size=10_000)  # not held: bounds count held requests only
    pod.send("a1", "a", 1.0, size=100)
    pod.send("a2", "a", 1.0, size=100)
    pod.send("a3", "a", 1.0, size=100)  # the flow's bound
    pod.send("b-big", "b", 1.0, size=900)  # the byte bound
    pod.send("b1", "b", 1.0, size=100)
    pod.send("c1", "c", 1.0, size=100)  # the total request bound
    assert pod.refused == {"a3": "queue_full", "b-big": "bytes_full", "c1": "queue_full"}
    assert (pod.dispatcher.count, pod.dispatcher.bytes) == (3, 300)
    pod.run(until=10.0)
    assert pod.order == ["running", "a1", "a2", "b1"]
    assert (pod.dispatcher.count, pod.dispatcher.bytes) == (0, 0)


def test_a_held_sheddable_request_makes_room_for_a_critical_one() -> None:
    def band_of(priority: int) -> BandPlan:
        return BandPlan(BandLimits(max_requests=5), False, 0.0, None, GlobalStrict)

    pod = OnePod(band_of, limits=DispatcherLimits(max_requests=2))
    pod.send("running", "a", 1.0)
    pod.send("batch-1", "a", 1.0, priority=-1)
    pod.send("batch-2", "a", 1.0, priority=-1)
    pod.send("critical", "b", 1.0, priority=10)
    assert pod.refused == {"batch-2": "evicted"}
    pod.run(until=10.0)
    assert pod.order == ["running", "critical", "batch-1"]


def test_a_request_held_past_its_ttl_is_refused_and_a_withdrawn_one_leaves_at_once() -> None:
    pod = OnePod(plan(GlobalStrict, ttl_s=3.0))
    pod.send("long", "a", 10.0)
    gone = pod.send("gone", "a", 1.0)
    pod.send("late", "a", 1.0)
    assert pod.dispatcher.withdraw(gone)
    assert pod.dispatcher.count == 1 and not pod.dispatcher.withdraw(gone)
    due = pod.dispatcher.next_expiry()
    assert due == 3.0
    pod.run(until=due)
    assert pod.dispatcher.expire(pod.now) == 1
    assert pod.refused == {"late": "ttl"}
    pod.run(until=20.0)
    assert pod.order == ["long"]
    assert pod.dispatcher.stats.rejected == {(0, "withdrawn"): 1, (0, "ttl"): 1}


def test_edf_orders_a_flow_by_deadline() -> None:
    def band_of(priority: int) -> BandPlan:
        return BandPlan(BandLimits(), True, 0.0, None, VirtualCost)

    pod = OnePod(band_of)
    pod.send("running", "a", 1.0)
    for name, deadline in (("late", 9.0), ("soon", 2.0), ("middle", 5.0)):
        pod.send(name, "a", 1.0, deadline=deadline)
    pod.run(until=10.0)
    assert pod.order == ["running", "soon", "middle", "late"]
