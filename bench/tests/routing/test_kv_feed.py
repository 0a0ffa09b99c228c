"""A precise system in virtual time routes on the engines' own KV events: after a run with
evictions the index it reads is exactly what each engine caches, and it finds prefixes."""

from __future__ import annotations

from pathlib import Path

from mmgate.vllm.blocks import event_hash
from mmgate_bench.routing.des import DesOptions, Simulation
from mmgate_bench.routing.records import Ladder
from mmgate_bench.routing.systems import resolve
from mmgate_bench.workloads.synthetic import shared_prefix

PRECISE = Path(__file__).resolve().parents[3] / "docs" / "benchmarks" / "precise" / "precise-prefix.yaml"
SMALL = {"groups": 6, "prompts_per_group": 3, "width": 320, "height": 192, "question_tokens": 200}


def test_the_index_mirrors_every_engine_after_a_run_with_evictions() -> None:
    sim = Simulation(resolve(str(PRECISE)), DesOptions(profile="fast", pods=2, engine={"num_gpu_blocks": 96}))
    feed = sim.kv_feed
    assert feed is not None
    workload = shared_prefix(output_tokens=8, **SMALL)
    items = workload.stream()
    seen: list[object] = []
    universe: set[bytes | int] = set()

    def next_item() -> object:
        item = next(items)
        seen.append(item)
        return item

    rung = sim.run_rung(next_item, 4.0, 6.0, Ladder(rates=(4.0,), duration_s=6.0), 0)  # type: ignore[arg-type]
    assert all(r.ok for r in rung.records)
    for item in seen:
        seq = sim.prepared.get(item)[1]  # type: ignore[arg-type]
        universe.update(sim.pods[0].engine.hasher.block_hashes(seq.token_ids, seq.mm_items, None))
    assert feed.events > 0
    evicted = 0
    for pod in sim.pods:
        held = set(feed.index.keys_of(pod.endpoint.name))
        for key in universe:
            assert (event_hash(key) in held) == pod.engine.is_cached(key)
            evicted += not pod.engine.is_cached(key)
    assert evicted > 0  # 96 blocks a pod: the run evicted
    assert rung.cache.prefix_hits > 0


def test_engines_hash_as_the_precise_producer_does_and_a_mismatch_is_refused(tmp_path: Path) -> None:
    sim = Simulation(resolve(str(PRECISE)), DesOptions(profile="fast", pods=1))
    assert sim.pods[0].engine.hasher.algo == "sha256"
    odd = tmp_path / "odd.yaml"
    odd.write_text(PRECISE.read_text().replace("blockSize: 16", "blockSize: 32"))
    try:
        Simulation(resolve(str(odd)), DesOptions(profile="fast", pods=1))
    except ValueError as exc:
        assert "blockSize 32" in str(exc)
    else:
        raise AssertionError("a block size the pods do not use was accepted")


def test_kv_blocks_is_a_des_flag_with_a_positive_count(tmp_path: Path) -> None:
    from mmgate_bench.cli import main as bench

    for args in (["run", "--kv-blocks", "64"], ["des", "--kv-blocks", "0"]):
        assert bench([*args, "--rates", "1", "--duration", "1", "--out", str(tmp_path)]) == 2
