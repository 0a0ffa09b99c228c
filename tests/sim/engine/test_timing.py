"""Step time: decode batching on a profile, seeded noise."""

from __future__ import annotations

from mmgate.sim.engine import (
    Engine,
    EngineConfig,
    SimRequest,
)
from support.engine import drain, serve


def test_decode_batches_almost_for_free_on_qwen2_vl() -> None:
    def decode_step(n: int) -> float:
        engine = Engine("qwen2-vl-2b-rtx4060")
        for i in range(n):
            engine.add_request(SimRequest(f"r{i}", list(range(i * 64, i * 64 + 64)), max_tokens=10), 0.0)
        engine.step(0.0)
        return engine.step(1.0).duration

    assert decode_step(16) < 1.15 * decode_step(1)


def test_noise_is_seeded() -> None:
    def durations(seed: int) -> list[float]:
        engine = Engine("fast", EngineConfig(noise=0.1, seed=seed))
        serve(engine, SimRequest("a", list(range(50)), max_tokens=5))
        return [
            s.duration
            for s in drain(engine, serve(engine, SimRequest("b", list(range(60)), max_tokens=5))).steps
        ]

    assert durations(1) == durations(1)
    assert durations(1) != durations(2)
