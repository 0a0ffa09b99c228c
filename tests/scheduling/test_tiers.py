"""Tier sizing: each role's held work and the replicas it asks for."""

from __future__ import annotations

from mmgate.scheduling.tiers import PodLoad, tier_demand


def test_each_role_asks_for_the_pods_that_drain_its_work_within_its_target() -> None:
    pods = [
        PodLoad("encode", 1.2, 0, 3, 1e-4),
        PodLoad("encode", 0.9, 0, 2, 1e-4),
        PodLoad("prefill-decode", 0.1, 20_000, 9, 1e-4),  # 0.1 + 2.0 s
        PodLoad("prefill-decode", 0.0, 0, 4, 1e-4),
        PodLoad("decode", 0.0, 0, 130, 1e-4),
    ]
    targets = {"encode": 0.5, "prefill-decode": 1.0}
    got = {d.role: d for d in tier_demand(pods, targets.__getitem__, target_requests=64)}
    enc, pd, dec = got["encode"], got["prefill-decode"], got["decode"]
    assert (enc.replicas, enc.requests, enc.prefill_tokens) == (2, 5, 0)
    assert enc.encoder_seconds == enc.work_seconds == 2.1 and enc.desired_replicas == 5  # 2.1 / 0.5
    assert pd.prefill_tokens == 20_000 and abs(pd.work_seconds - 2.1) < 1e-9 and pd.desired_replicas == 3
    assert dec.desired_replicas == 3  # 130 requests / 64 a pod


def test_an_idle_tier_asks_for_one_pod() -> None:
    (idle,) = tier_demand([PodLoad("encode", 0.0, 0, 0, 1e-4)] * 4, lambda _: 0.5, 64)
    assert (idle.replicas, idle.work_seconds, idle.desired_replicas) == (4, 0.0, 1)
