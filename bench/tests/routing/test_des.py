"""The discrete-event mode runs the real scheduler and engines, and agrees with the HTTP mode."""

from __future__ import annotations

from pathlib import Path

import pytest

from mmgate_bench.routing.des import DesOptions, Simulation, run_des
from mmgate_bench.routing.http_mode import HttpOptions, run_http
from mmgate_bench.routing.records import Ladder
from mmgate_bench.routing.report import summarize
from mmgate_bench.routing.systems import resolve
from mmgate_bench.workloads.synthetic import in_prompt_order, shared_prefix

SMALL = {"groups": 6, "prompts_per_group": 3, "width": 320, "height": 192, "question_tokens": 200}


def test_tiny_scenario_runs_in_virtual_time() -> None:
    workload = shared_prefix(output_tokens=20, **SMALL)
    ladder = Ladder(rates=(2.0, 4.0), duration_s=5.0)
    results = run_des(workload, [resolve("round-robin")], ladder, DesOptions(pods=2), progress=False)
    assert [(r.rate, len(r.records), r.mode) for r in results] == [(2.0, 10, "des"), (4.0, 20, "des")]
    for rung in results:
        assert all(r.ok and r.output_tokens == 20 for r in rung.records)
        assert all(0 < r.ttft_s < r.e2e_s for r in rung.records)  # type: ignore[operator]
        endpoints = [r.endpoint for r in sorted(rung.records, key=lambda r: r.sent_s)]
        assert endpoints[0] != endpoints[1] and endpoints[0] == endpoints[2]  # round robin
        rec = summarize(rung)
        assert rec["itl_p50_s"] > 0 and rec["requests_per_s"] > 0
    # the second rung re-sends prompts the first one cached
    assert results[1].cache.prefix_hits > 0


def test_inference_perf_order_brings_each_prompt_back_on_the_same_fleet() -> None:
    """One shuffled list cycled across rungs: the second rung re-sends the first rung's prompts,
    so a fleet kept across rungs hits its prefix cache for whole prompts."""
    workload = in_prompt_order(shared_prefix(output_tokens=4, **SMALL), "inference-perf")
    ladder = Ladder(rates=(2.0, 2.0), duration_s=9.0)  # 18 prompts per rung = one pass each
    first, second = run_des(workload, [resolve("aggregated")], ladder, DesOptions(pods=2), progress=False)
    assert sorted(r.item_id for r in first.records) == sorted(r.item_id for r in second.records)
    assert (second.cache.prefix_hit_ratio or 0) > 0.9 > (first.cache.prefix_hit_ratio or 0)


def test_scrapes_are_periodic_so_the_scheduler_sees_stale_metrics() -> None:
    sim = Simulation(resolve("round-robin"), DesOptions(pods=2, scrape_interval_s=0.5))
    workload = shared_prefix(output_tokens=50, **SMALL)
    items = workload.stream()
    sim.run_rung(lambda: next(items), 4.0, 3.0, Ladder(rates=(4.0,), duration_s=3.0), 0)
    for ep in sim.endpoints:
        assert ep.metrics is not None
        age = sim.now - ep.metrics.scraped_at
        assert 0 <= age <= 0.5 + 1e-9


def test_prefix_affinity_beats_round_robin_on_cache_hits() -> None:
    workload = shared_prefix(output_tokens=20, **SMALL)
    ladder = Ladder(rates=(6.0,), duration_s=8.0)
    systems = [resolve("round-robin"), resolve("aggregated")]
    rr, agg = run_des(workload, systems, ladder, DesOptions(pods=4), progress=False)
    assert (agg.cache.prefix_hit_ratio or 0) > (rr.cache.prefix_hit_ratio or 0) + 0.1


@pytest.mark.slow
def test_http_and_des_agree_on_a_small_scenario(tmp_path: Path) -> None:
    """The consistency check: the same scenario through the real gateway and simulated pods over
    loopback (time-scaled 2x) and in the DES. Both modes draw the same seeded arrivals, so they
    must serve the same requests and tokens; round robin makes the placement independent of
    timing, so the cache hits must match too. Wall time only adds to the HTTP mode (the simulated
    pods sleep at least the modelled time; parsing, proxying and sockets come on top), so its
    throughput can only be lower and its TTFT and end-to-end latencies only higher than the DES's;
    how close they are at scale is measured in docs/benchmarks/des-http.md."""
    workload = shared_prefix(output_tokens=40, **SMALL)
    ladder = Ladder(rates=(3.0,), duration_s=8.0)
    system = [resolve("round-robin")]
    (http,) = run_http(workload, system, ladder, HttpOptions(pods=2, speedup=2.0), progress=False)
    (des,) = run_des(workload, system, ladder, DesOptions(pods=2), progress=False)
    h, d = summarize(http), summarize(des)
    assert h["failures"] == 0 and d["failures"] == 0
    assert h["requests"] == h["completed"] == d["completed"] == d["requests"] > 0
    sent_h = sorted(http.records, key=lambda r: r.sent_s)
    sent_d = sorted(des.records, key=lambda r: r.sent_s)
    assert [r.output_tokens for r in sent_h] == [r.output_tokens for r in sent_d]
    # the same work over a span that wall time can only stretch
    assert http.span_s >= ladder.duration_s and des.span_s >= ladder.duration_s
    assert h["requests_per_s"] <= d["requests_per_s"] * 1.01
    assert h["output_tokens_per_s"] <= d["output_tokens_per_s"] * 1.01
    for key in ("ttft_p50_s", "ttft_p90_s", "e2e_p50_s", "e2e_p90_s"):
        assert h[key] >= 0.97 * d[key] > 0, (key, h[key], d[key])
    assert all(0 < r.ttft_s < r.e2e_s for r in sent_h)  # type: ignore[operator]
    assert h["prefix_cache_hit_ratio"] == pytest.approx(d["prefix_cache_hit_ratio"], abs=0.02)


@pytest.mark.slow
def test_over_http_the_prediction_error_is_read_from_the_gateway() -> None:
    """HTTP mode has no per-request prediction: the rung's share of the gateway's error
    histogram gives the median, per pod and overall, in simulated seconds."""
    workload = shared_prefix(output_tokens=10, **SMALL)
    ladder = Ladder(rates=(4.0, 4.0), duration_s=3.0)
    first, second = run_http(
        workload, [resolve("predicted-ttft")], ladder, HttpOptions(pods=2, speedup=2.0), progress=False
    )
    for rung in (first, second):
        rec = summarize(rung)
        assert rec["ttft_prediction_error_source"] == "gateway histogram"
        by_pod = rec["ttft_prediction_abs_error_p50_s_by_endpoint"]
        assert set(by_pod) <= {r.endpoint for r in rung.records} and by_pod
        assert 0 <= rec["ttft_prediction_abs_error_p50_s"] < max(r.ttft_s or 0 for r in rung.records)
    # each rung counts its own answers only (the second scrape's difference, not the running total)
    assert second.prediction_errors is not None
    counted = sum(max(b.values()) for b in second.prediction_errors.values())
    assert counted == sum(1 for r in second.records if r.ok)


def test_headline_quick_writes_reports_and_summary(tmp_path: Path) -> None:
    from mmgate_bench.routing.headline import run_headline

    assert run_headline(tmp_path, quick=True) == 0
    for name in ("shared-prefix", "image-reuse"):
        for f in ("report.json", "report.md", "throughput.png", "ttft.png", "cache_hit.png"):
            assert (tmp_path / name / f).stat().st_size > 0
    text = (tmp_path / "summary.md").read_text()
    assert "## shared-prefix" in text and "## image-reuse" in text and "× round-robin" in text
    assert "simulated requests" in text


@pytest.mark.parametrize("profile", ["qwen3-vl-4b-a100", "qwen3-vl-8b-h100"])
def test_the_arithmetic_profiles_run_in_virtual_time(profile: str) -> None:
    workload = shared_prefix(output_tokens=10, **SMALL)
    ladder = Ladder(rates=(2.0,), duration_s=3.0)
    opts = DesOptions(pods=2, profile=profile)
    (rung,) = run_des(workload, [resolve("aggregated")], ladder, opts, progress=False)
    assert rung.records and all(r.ok and r.output_tokens == 10 for r in rung.records)
