"""What ``predicted-ttft-producer`` leaves for each candidate is the model's equations applied to
the other producers' data, bit for bit, over seeded random decisions.

The producer's per-candidate loop is written for speed (the model's sum inlined, shortcuts for
endpoints that hold none of the request's media); here the same quantities are recomputed the
plain way from the published data: the terms from the prefix and encoder-cache match info, the
prediction as :meth:`Rates.seconds` of the terms plus the front end's seconds (the request's own,
less what the caches are believed to save, and the endpoint's backlog past its load), the
request's own work and the future cost from
docs/plugins/predicted-ttft.md's equations. The decisions run ``examples/predicted-ttft.yaml``
with learning on, stale and missing scrapes, queues and first tokens drawn from a seed, so the
rates differ per endpoint and every branch of the loop is taken.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping
from pathlib import Path

import pytest

from mmgate.config import load_config
from mmgate.request.view import Api, MediaAsset, RequestView
from mmgate.scheduling import EndpointState, Metrics, SchedulingRequest, build_scheduler
from mmgate.scheduling.keys import (
    ENCODER_CACHE_MATCH,
    PREDICTED_TTFT,
    PREFIX_MATCH,
    TOKENIZED_PROMPT,
    PredictedTTFT,
)
from mmgate.scheduling.plugins.predicted_ttft_producer import PredictedTTFTProducer
from mmgate.scheduling.ttft import Vector
from support.scheduling import image

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "predicted-ttft.yaml"


def expected_terms(
    r: SchedulingRequest, ep: EndpointState, mean_tokens: float, fresh: bool, skipped: Mapping[str, float]
) -> tuple[Vector, float]:
    """The model's terms for ``ep``, from the token, prefix and encoder-cache producers' data, and
    the processor seconds its caches are believed to save (``skipped``: per item, if held)."""
    tp = r.get(TOKENIZED_PROMPT)
    prefix = r.get(PREFIX_MATCH)
    encoder = r.get(ENCODER_CACHE_MATCH)
    assert tp is not None and prefix is not None and encoder is not None
    cached = min(prefix.matched.get(ep.name, 0) * prefix.block_size, prefix.prompt_tokens)
    held = {encoder.identities[i] for i in encoder.matched_indices.get(ep.name, [])}
    encode = hits = 0
    saved = 0.0
    seen: set[str] = set()
    for item in tp.media:
        if item.identity in seen:  # an item repeated is encoded once, where it first appears
            continue
        seen.add(item.identity)
        if item.offset + item.length <= cached or item.identity in held:
            saved += skipped.get(item.identity, 0.0)
        if item.offset + item.length <= cached:
            continue
        if item.identity in held:
            hits += item.length
        else:
            encode += item.length
    ahead = ep.inflight.tokens
    if fresh and ep.metrics is not None and ep.metrics.waiting:
        ahead = max(ahead, int(ep.metrics.waiting * mean_tokens))
    media_ahead = ep.inflight.media_tokens
    return (1.0, max(tp.total_tokens - cached, 0), media_ahead + encode, hits, cached, ahead), saved


def views(rng: random.Random) -> list[RequestView]:
    """Requests of a few prefix groups, each with its own images; some repeat a question."""
    out = []
    for g in range(6):
        system = f"system prompt of group {g} " * rng.randrange(1, 60)
        pool = [
            image(f"g{g}-img{k}", rng.choice((320, 640, 1280)), rng.choice((240, 480, 720))) for k in range(4)
        ]
        for q in range(8):
            chosen: list[str | MediaAsset] = list(rng.sample(pool, rng.randrange(4)))
            if chosen and rng.random() < 0.3:
                chosen.append(chosen[0])  # an image twice: encoded once
            out.append(
                RequestView(
                    Api.CHAT, "m", [system, *chosen, f"question {q} " * rng.randrange(1, 40)], stream=True
                )
            )
    return out


@pytest.mark.parametrize("seed", [1, 2])
def test_each_candidates_prediction_work_and_future_cost_follow_the_model(seed: int) -> None:
    rng = random.Random(seed)
    cfg = load_config(EXAMPLE)
    s = build_scheduler(cfg.picker, mmgate=cfg.mmgate, seed=seed)
    producer = next(p for p in s.producers if isinstance(p, PredictedTTFTProducer))
    eps = [
        EndpointState(f"10.0.0.{i}:8000", metrics=Metrics(block_size=16, num_gpu_blocks=60000))
        for i in range(8)
    ]
    pool = views(rng)
    mean_sum = mean_weight = 0.0  # the mean prompt size placed, as the producer keeps it
    open_: list[str] = []
    now = 10.0
    stale_seen = learned_seen = fronted = 0
    for n in range(600):
        now += rng.random() * 0.05
        for ep in eps:
            if rng.random() < 0.3:
                age = rng.choice((0.0, 0.0, 0.0, 30.0))
                ep.metrics = (
                    None if rng.random() < 0.02 else Metrics(waiting=rng.randrange(5), scraped_at=now - age)
                )
        r = SchedulingRequest(pool[rng.randrange(len(pool))], f"r{n}")
        service, drawn = producer.mean_placed_work, producer.later_requests_per_cold_placement
        result = s.schedule(r, eps, now)
        info = r.get(PREDICTED_TTFT)
        assert isinstance(info, PredictedTTFT)
        mean_tokens = mean_sum / mean_weight if mean_weight else 0.0
        fresh = {
            ep.name: ep.metrics is not None and now - ep.metrics.scraped_at <= s.metrics_staleness_s
            for ep in eps
        }
        tp = r.get(TOKENIZED_PROMPT)
        assert tp is not None
        load, processing, skipped = (
            producer.frontend.seconds(r.view.assets, tp.media) if tp.media else (0.0, 0.0, {})
        )
        assert info.frontend == (load, processing)
        expected = {ep.name: expected_terms(r, ep, mean_tokens, fresh[ep.name], skipped) for ep in eps}
        terms = {name: x for name, (x, _) in expected.items()}
        assert info.terms == terms
        saved = {name: v for name, (_, v) in expected.items() if v}
        assert info.frontend_saved == saved
        rates = {ep.name: producer.learner.rates(ep) for ep in eps}
        plain = {name: rates[name].seconds(x) + load + processing for name, x in terms.items()}
        for name in plain:
            if name in saved:  # the processor cache holds what the prefix or encoder cache does
                plain[name] -= saved[name]
            backlog = producer.frontend_backlog(name, now) if processing > 0 else 0.0
            if backlog > load:  # the API server's backlog past this request's own load
                plain[name] += backlog - load
            fronted += backlog > load
        worst = max((plain[name] for name in plain if fresh[name]), default=None)
        assert info.stale == [name for name in plain if not fresh[name]]
        assert info.seconds == {
            name: v + worst if worst is not None and not fresh[name] else v for name, v in plain.items()
        }
        most = max(x[3] + x[4] for x in terms.values())
        assert info.most_reused == most
        marginal = {}
        for name in terms:
            wait = producer.queue_average(name)
            marginal[name] = wait * (2.0 + wait / service) if service > 0 else wait
        holders_wait = min(
            (marginal[name] for name, x in terms.items() if most > 0 and x[3] + x[4] >= most),
            default=math.inf,
        )
        for ep in eps:
            x, rt = terms[ep.name], rates[ep.name]
            encode = x[2] - ep.inflight.media_tokens
            fresh_work = rt.prefill_s_per_token * x[1] + rt.encoder_s_per_token * encode
            own_work = fresh_work + rt.encoder_hit_s_per_token * x[3] + rt.prefix_hit_s_per_token * x[4]
            assert info.work[ep.name] == own_work
            load_share = producer.queue_average(ep.name) / service if service > 0 else 0.0
            assert info.future[ep.name] == (
                drawn * min(marginal[ep.name], holders_wait)
                + producer.displaced_reuse(ep.name) * fresh_work
                + own_work * load_share * (1.0 + load_share)
            )
        stale_seen += len(info.stale)
        learned_seen += sum(producer.learner.learned(ep.name) for ep in eps)
        s.pre_request(r, result, now)
        s.start(r, result, now)
        mean_sum, mean_weight = mean_sum * 0.99 + tp.total_tokens, mean_weight * 0.99 + 1.0
        open_.append(r.request_id)
        while open_ and (len(open_) > 24 or rng.random() < 0.4):
            rid = open_.pop(rng.randrange(len(open_)))
            s.on_first_token(rid, now + rng.random() * 0.3)
            s.on_finished(rid, now + 0.5)
    assert stale_seen and learned_seen and fronted  # the pessimistic, learned and front-end paths ran
