"""`mmgate bench topologies`: the layouts at one accelerator count, the SLO arithmetic, the reports."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from mmgate.sim.server import SimPod
from mmgate_bench.cli import main
from mmgate_bench.routing.fleet_proc import fleet_of
from mmgate_bench.routing.records import RequestRecord, RungResult
from mmgate_bench.routing.stage_counters import FALLBACKS, OUTCOME, REASON, by_prefix, parse_stage_counters
from mmgate_bench.routing.topologies import (
    ENCODER_DP,
    Topology,
    accelerators_per_pod,
    gateway_config,
    slo_fields,
    sustained,
    topologies,
)
from mmgate_bench.workloads.synthetic import export_jsonl, image_mixed


def test_the_same_accelerators_make_each_layout() -> None:
    layouts = {t.name: (t.layout, t.system) for t in topologies(8, 1, ("aggregated", "e-pd", "e-p-d"))}
    assert layouts == {
        "aggregated": ("8 EPD", "aggregated"),
        "e-pd": ("2 E + 6 PD", "e-pd"),
        "e-p-d": ("2 E + 2 P + 4 D", "e-p-d"),
    }
    tp2 = {t.name: t.layout for t in topologies(8, accelerators_per_pod("qwen3-vl-32b-h200-tp2"))}
    assert tp2["e-pd"] == "1 E + 3 PD" and tp2["e-p-d"] == "1 E + 1 P + 2 D" and tp2["aggregated"] == "4 EPD"
    assert all(t.accelerators == 8 for t in topologies(8, 2))
    (dp,) = topologies(8, 2, ("encoder-dp",))
    assert dp.system == "aggregated" and dp.engine == {"mm_encoder_tp_mode": "data"}  # another engine
    (affinity,) = topologies(8, 2, ("encoder-affinity",))
    assert (affinity.system, affinity.layout, affinity.engine) == ("encoder-affinity", "4 EPD", {})


def test_layouts_that_do_not_fit_are_refused() -> None:
    with pytest.raises(ValueError, match="whole number"):
        topologies(7, 2)
    with pytest.raises(ValueError, match="e-p-d needs more"):
        topologies(4, 2, ("e-p-d",))
    with pytest.raises(ValueError, match="unknown topology"):
        topologies(8, 1, ("pd",))
    with pytest.raises(ValueError, match="adds up to 5 pods"):
        topologies(8, 2, ("e-p-d:1+2+2",))
    with pytest.raises(ValueError, match="3 pod counts"):
        topologies(8, 2, ("e-p-d:1+3",))


def test_a_split_can_be_stated() -> None:
    (one,) = topologies(8, 2, ("e-p-d:1+2+1",))
    assert one.layout == "1 E + 2 P + 1 D" and one.system == "e-p-d" and one.name == "e-p-d:1+2+1"


def test_a_topology_may_run_another_config() -> None:
    (mine,) = topologies(8, 2, ("e-pd:2+2@encoder-affinity",))
    assert (mine.name, mine.system, mine.layout) == (
        "e-pd:2+2@encoder-affinity",
        "encoder-affinity",
        "2 E + 2 PD",
    )
    with pytest.raises(ValueError, match="name a gateway config after '@'"):
        topologies(8, 2, ("e-pd@",))


def test_encoders_of_another_profile_come_on_top_of_the_accelerators() -> None:
    l4 = "qwen3-vl-32b-encoder-l4"
    hetero, agg = topologies(6, 2, ("e-pd:6+3@e-pd-adaptive", "aggregated"), encoder_profile=l4)
    assert hetero.layout == f"6 E [{l4}] + 3 PD" and hetero.pods == 9 and hetero.accelerators == 6
    assert hetero.profiles == (l4,) * 6 + ("",) * 3
    assert agg.layout == "3 EPD" and agg.profiles == ()  # no encode pods: the run's profile alone
    with pytest.raises(ValueError, match="state the split"):
        topologies(6, 2, ("e-pd",), encoder_profile=l4)
    with pytest.raises(ValueError, match="besides the encoders"):
        topologies(6, 2, ("e-pd:6+2",), encoder_profile=l4)


def test_the_mixed_workload_runs_adaptive_and_reports_where_media_were_encoded(tmp_path: Path) -> None:
    argv = ["topologies", "--quick", "--quiet", "--workloads", "mixed", "--accelerators", "6",
            "--encoder-profile", "qwen3-vl-32b-encoder-l4", "--seed", "3",
            "--topologies", "aggregated,e-pd:2+3@e-pd-adaptive", "--out", str(tmp_path)]  # fmt: skip
    assert main(argv) == 0
    doc = json.loads((tmp_path / "mixed-des" / "report.json").read_text())
    assert doc["meta"]["encoder_profile"] == "qwen3-vl-32b-encoder-l4"
    assert doc["meta"]["seed"] == doc["meta"]["workload_params"]["seed"] == 3  # another draw of the traffic
    by = {r["system"]: r for r in doc["records"] if r["rate"] == 2.0}
    assert by["aggregated"]["encode_outcomes"] == by["aggregated"]["encode_reasons"] == {}
    adaptive = by["e-pd:2+3@e-pd-adaptive"]
    assert sum(adaptive["encode_outcomes"].values()) == adaptive["requests"]  # every request has media
    assert sum(adaptive["encode_reasons"].values()) == adaptive["requests"]
    assert all(reason.startswith(("slo-", "cached-")) for reason in adaptive["encode_reasons"])


def test_accelerators_per_pod_reads_the_tensor_parallel_degree() -> None:
    assert accelerators_per_pod("qwen3-vl-32b-h200-tp2") == 2
    assert accelerators_per_pod("qwen3-vl-8b-h100") == 1


def _rung(records: list[RequestRecord]) -> RungResult:
    return RungResult("x", 2.0, 10.0, 10.0, records, mode="des")


def test_goodput_counts_requests_within_both_slos_and_failures_as_misses() -> None:
    records = [
        RequestRecord("a", 0.0, ttft_s=1.0, e2e_s=2.0, output_tokens=41),  # TPOT 25 ms: met
        RequestRecord("b", 0.0, ttft_s=3.0, e2e_s=4.0, output_tokens=41),  # TTFT missed
        RequestRecord("c", 0.0, ttft_s=1.0, e2e_s=5.0, output_tokens=41),  # TPOT 100 ms: missed
        RequestRecord("d", 0.0, error="timeout"),
    ]
    fields = slo_fields(_rung(records), 4, ttft_slo_s=2.0, tpot_slo_s=0.05)
    assert fields["slo_attainment"] == 0.25
    assert fields["goodput_rps"] == pytest.approx(0.1) and fields[
        "goodput_rps_per_accelerator"
    ] == pytest.approx(0.025)
    assert fields["output_tokens_per_s_per_accelerator"] == pytest.approx(123 / 10 / 4)


def test_sustained_is_the_last_rate_of_an_unbroken_run_within_the_slo() -> None:
    recs = [{"rate": r, "slo_attainment": a} for r, a in ((1, 1.0), (2, 0.95), (3, 0.5), (4, 0.99))]
    assert sustained(recs) == 2
    assert sustained([{"rate": 1, "slo_attainment": 0.2}]) is None


def test_the_http_config_lists_the_fleet_with_roles_and_runs_the_legs_in_the_gateway(tmp_path: Path) -> None:
    (topo,) = topologies(8, 2, ("e-p-d",))
    urls = [f"http://127.0.0.1:{9000 + i}" for i in range(topo.pods)]
    doc = yaml.safe_load(gateway_config(topo, urls, tmp_path).read_text())
    assert doc["mmgate"]["endpoints"] == [
        {"url": urls[0], "role": "encode"},
        {"url": urls[1], "role": "prefill"},
        {"url": urls[2], "role": "decode"},
        {"url": urls[3], "role": "decode"},
    ]
    assert doc["mmgate"]["disaggregation"]["orchestrator"] == "gateway"
    sidecar = yaml.safe_load(gateway_config(topo, urls, tmp_path, "sidecar").read_text())
    assert sidecar["mmgate"]["disaggregation"]["orchestrator"] == "sidecar"
    aggregated = Topology("aggregated", "aggregated", ("", ""), 2)
    doc = yaml.safe_load(gateway_config(aggregated, urls[:2], tmp_path).read_text())
    assert doc["mmgate"]["endpoints"] == [{"url": urls[0]}, {"url": urls[1]}]
    assert "disaggregation" not in doc["mmgate"]


def test_quick_des_run_writes_tables_and_plots(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["topologies", "--quick", "--quiet", "--workloads", "image-heavy",
            "--topologies", "aggregated,encoder-dp,e-pd", "--out", str(tmp_path)]  # fmt: skip
    assert main(argv) == 0
    folder = tmp_path / "image-heavy-des"
    for name in ("report.json", "report.md", "topologies.png"):
        assert (folder / name).stat().st_size > 0
    records = json.loads((folder / "report.json").read_text())["records"]
    assert {r["system"] for r in records} == {"aggregated", "encoder-dp", "e-pd"}
    assert all(not r["encoder_cache_hit_ratio"] for r in records)  # cold: no image is sent twice
    text = capsys.readouterr().out
    assert "| **e-pd** | 1 E + 3 PD |" in text and "| **aggregated** | 4 EPD |" in text
    assert "TTFT ≤ 2 s and TPOT ≤ 50 ms" in text


def test_reused_images_are_served_from_the_encoder_caches(tmp_path: Path) -> None:
    argv = ["topologies", "--quick", "--quiet", "--workloads", "image-heavy-reuse",
            "--topologies", "e-pd,encoder-affinity", "--out", str(tmp_path)]  # fmt: skip
    assert main(argv) == 0
    doc = json.loads((tmp_path / "image-heavy-reuse-des" / "report.json").read_text())
    assert doc["meta"]["workload"] == "image-heavy-reuse" and doc["meta"]["workload_params"]["pool"] == 300
    by = {(r["system"], r["rate"]): r for r in doc["records"]}
    assert all(r["workload"] == "image-heavy-reuse" and r["completed"] == r["requests"] for r in by.values())
    assert by["e-pd", 2.0]["encoder_cache_hit_ratio"] > 0  # the encode pod held photos seen before


def test_bad_flags_are_a_message_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["topologies", "--workloads", "image-medium"]) == 2
    assert "unknown workload 'image-medium'" in capsys.readouterr().err
    assert main(["topologies", "--accelerators", "7"]) == 2
    assert "whole number" in capsys.readouterr().err
    assert main(["topologies", "--topologies", "e-pd@no-such.yaml"]) == 2
    assert "no-such.yaml does not exist" in capsys.readouterr().err
    assert main(["topologies", "--encoder-profile", "qwen3-vl-32b-encoder-l4", "--http"]) == 2
    assert "DES only" in capsys.readouterr().err
    assert main(["topologies", "--http-only", "--orchestrators", "gateway,envoy"]) == 2
    assert "--orchestrators: envoy; choose from gateway, sidecar" in capsys.readouterr().err


def test_the_stage_counters_read_encode_outcomes_and_fallbacks() -> None:
    text = """# TYPE mmgate_encode_decisions_total counter
mmgate_encode_decisions_total{outcome="tier",reason="cheaper-tier"} 3.0
mmgate_encode_decisions_total{outcome="tier",reason="cached-split"} 1.0
mmgate_encode_decisions_total{outcome="local",reason="cheaper-local"} 2.0
# TYPE mmgate_disagg_fallbacks_total counter
mmgate_disagg_fallbacks_total{stage="encode",action="local"} 1.0
"""
    counts = parse_stage_counters(text)
    assert by_prefix(counts, OUTCOME) == {"local": 2, "tier": 4}
    assert by_prefix(counts, REASON) == {"cached-split": 1, "cheaper-local": 2, "cheaper-tier": 3}
    assert counts[FALLBACKS] == 1
    assert parse_stage_counters("# TYPE other_total counter\nother_total 5.0\n") == {}


@pytest.mark.slow
@pytest.mark.timeout(360)  # two fleets and two gateways as child processes: minutes on a loaded machine
def test_quick_http_run_serves_every_request(tmp_path: Path) -> None:
    argv = ["topologies", "--quick", "--quiet", "--http-only", "--workloads", "image-light", "--topologies",
            "e-p-d,encoder-dp", "--speedup", "4", "--out", str(tmp_path)]  # fmt: skip
    assert main(argv) == 0
    doc = json.loads((tmp_path / "image-light-http" / "report.json").read_text())
    records = doc["records"]
    assert {r["system"] for r in records} == {"e-p-d", "encoder-dp"}
    assert all(r["failures"] == 0 and r["completed"] == r["requests"] > 0 for r in records)
    assert doc["meta"]["topologies"]["encoder-dp"]["engine"] == {"mm_encoder_tp_mode": "data"}


@pytest.mark.slow
@pytest.mark.timeout(360)
def test_quick_http_run_in_sidecar_mode_puts_a_sidecar_before_each_pd_pod(tmp_path: Path) -> None:
    """The same topology run twice, the legs sent by the gateway and then by an ``mmgate
    sidecar`` in front of each PD pod; the gateway counts where it had the media encoded, and
    with ``--logs`` its access log keeps each request's decision, one folder per run."""
    argv = ["topologies", "--quick", "--quiet", "--http-only", "--workloads", "mixed", "--topologies",
            "e-pd@e-pd-adaptive", "--orchestrators", "gateway,sidecar", "--speedup", "4",
            "--out", str(tmp_path), "--logs", str(tmp_path / "logs")]  # fmt: skip
    assert main(argv) == 0
    for run in ("e-pd-e-pd-adaptive", "e-pd-e-pd-adaptive-sidecar"):
        logged = [f.read_text() for f in (tmp_path / "logs" / run).glob("e-pd@*.log")]
        assert len(logged) == 1 and '"encode_reason"' in logged[0], run
    doc = json.loads((tmp_path / "mixed-http" / "report.json").read_text())
    records = doc["records"]
    assert {(r["system"], r["orchestrator"]) for r in records} == {
        ("e-pd@e-pd-adaptive", "gateway"),
        ("e-pd@e-pd-adaptive [sidecar]", "sidecar"),
    }
    assert all(r["failures"] == 0 and r["completed"] == r["requests"] > 0 for r in records)
    assert all(sum(r["encode_outcomes"].values()) == r["requests"] for r in records)  # every one had media
    assert all(sum(r["encode_reasons"].values()) == r["requests"] for r in records)
    assert all(r["stage_fallbacks"] == 0 for r in records)
    assert doc["meta"]["orchestrators"] == ["gateway", "sidecar"]


def test_the_http_fleet_runs_the_topologys_engine_settings() -> None:
    """encoder-dp over HTTP: every pod of the fleet process encodes on its replica's two GPUs."""

    def pods(*args: Any) -> list[SimPod]:
        return [SimPod(spec) for spec in fleet_of(*args).specs]

    profile = "qwen3-vl-32b-h200-tp2"
    assert [p.engine.encoder_lanes for p in pods(4, profile, 2.0, 0, (), ENCODER_DP)] == [2, 2, 2, 2]
    encode, pd = pods(2, profile, 2.0, 0, ("encode", "prefill-decode"), ENCODER_DP)
    assert encode.encoder is not None and encode.encoder.lanes == 2 and pd.engine.encoder_lanes == 2
    assert [p.engine.encoder_lanes for p in pods(1, profile, 2.0, 0)] == [1]  # weights mode: one lane


def test_a_recorded_jsonl_file_is_a_workload(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    recorded = tmp_path / "traffic.jsonl"
    export_jsonl(image_mixed(requests=12), recorded, n=12)
    argv = ["topologies", "--quick", "--quiet", "--jsonl", str(recorded),
            "--topologies", "aggregated,e-pd@e-pd-adaptive", "--out", str(tmp_path / "out")]  # fmt: skip
    assert main(argv) == 0
    doc = json.loads((tmp_path / "out" / "traffic-des" / "report.json").read_text())
    assert doc["meta"]["workload_params"] == {"jsonl": str(recorded)}
    assert all(r["workload"] == "traffic" and r["completed"] == r["requests"] > 0 for r in doc["records"])
    capsys.readouterr()
    assert main(["topologies", "--jsonl", str(tmp_path / "missing.jsonl")]) == 2
    assert "no such file" in capsys.readouterr().err
