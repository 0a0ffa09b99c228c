"""The shipped configs, driven through the whole scheduler the way the gateway and the DES drive it."""

from __future__ import annotations

from collections import Counter

from mmgate.config import load_config
from mmgate.request.view import MediaAsset
from mmgate.scheduling import EndpointState, Metrics, Scheduler, SchedulingRequest, build_scheduler
from mmgate.scheduling.plugins.approx_prefix_cache_producer import ApproxPrefixCacheProducer
from mmgate.scheduling.plugins.mm_embeddings_cache_producer import MMEmbeddingsCacheProducer
from support.processes import REPO
from support.scheduling import image, view

EXAMPLES = REPO / "examples"
SYSTEM = "You are a careful visual assistant. Answer briefly. " * 8


def load(name: str, seed: int = 0) -> Scheduler:
    cfg = load_config(EXAMPLES / name)
    return build_scheduler(cfg.picker, mmgate=cfg.mmgate, seed=seed)


def fleet(n: int = 4) -> list[EndpointState]:
    return [
        EndpointState(f"10.0.0.{i}:8000", metrics=Metrics(block_size=16, num_gpu_blocks=20000))
        for i in range(n)
    ]


def send(
    s: Scheduler,
    eps: list[EndpointState],
    rid: str,
    *parts: str | MediaAsset,
    now: float = 0.0,
    finish: bool = True,
) -> EndpointState:
    req = SchedulingRequest(view(*parts), rid)
    result = s.schedule(req, eps, now)
    s.on_started(req, result.target, now)
    s.pre_request(req, result, now)
    if finish:
        s.on_first_token(rid, now)
        s.on_finished(rid, now)
    return result.target


def group(g: int) -> list[str | MediaAsset]:
    return [SYSTEM, image(f"{g:032x}"), image(f"{g + 100:032x}"), image(f"{g + 200:032x}")]


def test_shared_prefix_groups_stick_to_one_endpoint() -> None:
    s, eps = load("aggregated.yaml"), fleet()
    homes: dict[int, set[str]] = {g: set() for g in range(6)}
    for q in range(5):
        for g in range(6):
            homes[g].add(send(s, eps, f"{g}-{q}", *group(g), f"question {q} about it").name)
    assert all(len(h) == 1 for h in homes.values())
    assert len({next(iter(h)) for h in homes.values()}) > 1  # groups themselves are spread


def test_affinity_gate_releases_an_overloaded_group() -> None:
    s, eps = load("aggregated.yaml"), fleet()
    home = send(s, eps, "warm", *group(1), "first question")
    # 40 s of queued prefill on the home pod at 15751 tok/s exceeds the 36 s penalty
    home.inflight.tokens = 15751 * 40
    elsewhere = send(s, eps, "next", *group(1), "second question")
    assert elsewhere is not home
    # the group now lives on both pods; the unloaded one of them wins, never a cold pod
    home.inflight.tokens = 15751 * 30
    assert send(s, eps, "again", *group(1), "third question") is elsewhere


def test_mixed_load_is_balanced_by_tokens_not_requests() -> None:
    s, eps = load("aggregated.yaml", seed=3), fleet(2)
    for i in range(60):  # requests stay in flight (never finish) so load accumulates
        if i % 10 == 0:  # 4 x 900 image tokens
            parts = [f"{i} look: ", *(image(f"{i:030x}{k:02x}") for k in range(4))]
        else:  # about 400 tokens of text
            parts = [f"{i} " + "word " * 320]
        send(s, eps, f"r{i}", *parts, finish=False)
    tokens = [ep.inflight.tokens for ep in eps]
    requests = [ep.inflight.requests for ep in eps]
    assert max(tokens) / min(tokens) < 1.5  # tokens even
    assert max(requests) / min(requests) > 2.0  # counts are not: the image-heavy pod took few


def test_repeat_image_with_unrelated_text_returns_to_its_encoder() -> None:
    s, eps = load("encoder-affinity.yaml"), fleet()
    picture = image("f" * 32)
    first = send(s, eps, "a", "What is in this picture?", picture)
    for i in range(8):
        assert send(s, eps, f"b{i}", f"Unrelated question {i}: count the objects.", picture) is first


def test_round_robin_and_random_baselines_spread_evenly() -> None:
    eps = fleet()
    rr = load("round-robin.yaml")
    assert [send(rr, eps, f"r{i}", "hi").name for i in range(8)] == [e.name for e in eps] * 2
    rnd = load("random.yaml")
    counts = Counter(send(rnd, eps, f"r{i}", *group(0), "q").name for i in range(400))
    assert len(counts) == 4 and min(counts.values()) > 60


def test_removing_an_endpoint_cleans_every_index() -> None:
    s, eps = load("encoder-affinity.yaml"), fleet()
    for i in range(12):
        send(s, eps, f"r{i}", *group(i % 4), f"q{i}")
    victim = (
        eps[0]
        if any(
            isinstance(p, ApproxPrefixCacheProducer) and eps[0].name in p.index.endpoints()
            for p in s.plugins.values()
        )
        else eps[1]
    )
    s.remove_endpoint(victim.name)
    for p in s.plugins.values():
        if isinstance(p, ApproxPrefixCacheProducer | MMEmbeddingsCacheProducer):
            assert victim.name not in p.index.endpoints()
            assert all(victim.name not in (p.index.holders(k) or ()) for k in p.index.held_keys())
    rest = [e for e in eps if e is not victim]
    assert send(s, rest, "after", *group(0), "q") in rest
