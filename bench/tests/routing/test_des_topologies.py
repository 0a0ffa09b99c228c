"""The DES runs disaggregated topologies through the gateway's own orchestration (virtual legs)."""

from __future__ import annotations

from typing import Any, Literal

from mmgate.disagg.orchestrate import OrchestrationSettings
from mmgate.scheduling.plugins.adaptive_encode_decider import AdaptiveEncodeDecider
from mmgate_bench.routing.des import DesOptions, PodReport, Simulation
from mmgate_bench.routing.records import Ladder, RungResult
from mmgate_bench.routing.systems import resolve
from mmgate_bench.workloads.synthetic import image_mixed, mixed

E_PD = ("encode", "encode", "prefill-decode", "prefill-decode")
E_P_D = ("encode", "prefill", "decode", "decode")


def _run(system: str, opts: DesOptions, text_only: float = 0.0) -> tuple[RungResult, list[PodReport]]:
    workload = mixed(requests=60, text_only_fraction=text_only, max_images=4, max_output_tokens=40)
    sim = Simulation(resolve(system), opts)
    items = workload.stream()
    rung = sim.run_rung(lambda: next(items), 3.0, 8.0, Ladder(rates=(3.0,), duration_s=8.0), 0)
    return rung, sim.pod_reports()


def _by_role(pods: list[PodReport], role: str) -> list[PodReport]:
    return [p for p in pods if p.role == role]


def test_e_pd_encodes_on_the_encode_pods_and_the_pd_pods_never_encode() -> None:
    rung, pods = _run("e-pd", DesOptions(pods=4, roles=E_PD))
    assert rung.records and all(r.ok and r.output_tokens > 0 for r in rung.records)
    encoders, pd = _by_role(pods, "encode"), _by_role(pods, "prefill-decode")
    assert all(p.encoded_items > 0 and p.encoder_cache_queries > 0 and p.legs > 0 for p in encoders)
    assert all(p.media_load_seconds > 0 for p in encoders)  # their front ends loaded every leg's image
    assert all(p.encoder_seconds == 0.0 and p.legs == 0 for p in pd)  # every item arrived encoded
    assert {r.endpoint for r in rung.records} <= {p.name for p in pd}


def test_a_text_only_workload_never_touches_an_encoder() -> None:
    rung, pods = _run("e-pd", DesOptions(pods=4, roles=E_PD), text_only=1.0)
    assert rung.records and all(r.ok for r in rung.records)
    assert all(p.legs == 0 and p.encoder_cache_queries == 0 for p in _by_role(pods, "encode"))


def test_e_p_d_prefills_on_the_prefill_pod_and_hands_the_kv_to_a_decode_pod() -> None:
    rung, pods = _run("e-p-d", DesOptions(pods=4, roles=E_P_D))
    assert rung.records and all(r.ok for r in rung.records)
    (prefill,) = _by_role(pods, "prefill")
    decoders = _by_role(pods, "decode")
    assert prefill.legs == len(rung.records)  # one prefill leg per request
    assert {r.endpoint for r in rung.records} <= {p.name for p in decoders}
    # the decode pods got the KV: they neither encoded nor looked up an encoder output
    assert all(p.encoder_seconds == 0.0 and p.encoder_cache_queries == 0 for p in decoders)
    assert prefill.encoder_seconds == 0.0 and prefill.encoder_cache_queries > 0  # outputs came from E


def test_kv_transfer_time_is_paid_by_the_decode_pod() -> None:
    fast, _ = _run("e-p-d", DesOptions(pods=4, roles=E_P_D, pod_settings={"kv_transfer_s_per_token": 0.0}))
    slow, _ = _run("e-p-d", DesOptions(pods=4, roles=E_P_D, pod_settings={"kv_transfer_s_per_token": 1e-3}))
    ttft = {id(r): sorted(x.ttft_s or 0.0 for x in r.records) for r in (fast, slow)}
    # each prompt is hundreds of tokens: a millisecond a token is at least 0.1 s more per request
    assert all(s >= f + 0.1 for f, s in zip(ttft[id(fast)], ttft[id(slow)], strict=True))


def test_an_encoder_that_times_out_falls_back_as_configured() -> None:
    def hopeless(fallback: Literal["local", "fail"]) -> DesOptions:
        settings = OrchestrationSettings(encode_timeout_s=1e-6, stage_retries=1, fallback=fallback)
        return DesOptions(pods=4, roles=E_PD, orchestration=settings)

    local, pods = _run("e-pd", hopeless("local"))
    assert local.records and all(r.ok for r in local.records)  # no lost request
    assert sum(p.encoder_seconds for p in _by_role(pods, "prefill-decode")) > 0  # the PD pods encoded
    fail, _ = _run("e-pd", hopeless("fail"))
    assert fail.records and all(r.error == "http_503" for r in fail.records)


def test_an_encode_pod_with_encoder_data_parallelism_encodes_legs_side_by_side() -> None:
    roles = ("encode", "prefill-decode")
    one, one_pods = _run("e-pd", DesOptions(pods=2, roles=roles))
    data = {"mm_encoder_tp_mode": "data", "tensor_parallel_size": 4}
    four, four_pods = _run("e-pd", DesOptions(pods=2, roles=roles, engine=data))
    assert all(r.ok for r in (*one.records, *four.records)) and len(one.records) == len(four.records)
    (enc1,), (enc4,) = _by_role(one_pods, "encode"), _by_role(four_pods, "encode")
    assert enc1.encoded_items == enc4.encoded_items > 0  # the same work ...
    assert enc1.encoder_seconds == enc4.encoder_seconds  # ... and encoder time, on four lanes at once:
    waited = [sum(r.ttft_s or 0.0 for r in rung.records) for rung in (one, four)]
    assert waited[1] < waited[0]


def test_adaptive_encode_sends_one_workload_both_ways_as_its_predicted_ttft_says() -> None:
    """Image-light and image-heavy requests interleaved on 1 E + 3 PD past the encoder's
    capacity: the encode pod takes each request's media while its predicted TTFT through the
    tier meets the example's 2 s SLO, the PD pods encode the rest (all or some items), and the
    engines show both (legs on the encoder, encoder seconds on the PD pods)."""
    sim = Simulation(resolve("e-pd-adaptive"), DesOptions(pods=4, roles=("encode", *("prefill-decode",) * 3)))
    (decider,) = [p for p in sim.scheduler.plugins.values() if isinstance(p, AdaptiveEncodeDecider)]
    slo = decider.params.ttftSLOSeconds
    seen: list[tuple[str, str, float]] = []
    choose = decider.choose

    def spy(*args: Any) -> Any:
        choice = choose(*args)
        seen.append((choice.outcome, choice.reason, choice.tier_cost))
        return choice

    decider.choose = spy  # type: ignore[method-assign,assignment]
    items = image_mixed(requests=120).stream()
    rung = sim.run_rung(lambda: next(items), 8.0, 12.0, Ladder(rates=(8.0,), duration_s=12.0), 0)
    assert rung.records and all(r.ok for r in rung.records)
    outcomes = {r.encode for r in rung.records}
    assert "tier" in outcomes and outcomes & {"local", "split"}
    for outcome, reason, via_tier in seen:
        assert reason.startswith("slo-")
        assert (via_tier <= slo) if outcome == "tier" else (via_tier > slo)
    pods = sim.pod_reports()
    assert _by_role(pods, "encode")[0].legs > 0
    assert sum(p.encoder_seconds for p in _by_role(pods, "prefill-decode")) > 0
