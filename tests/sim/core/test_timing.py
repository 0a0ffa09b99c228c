"""Step time: the per-step floor, decode batching on a profile, seeded noise."""

from __future__ import annotations

import pytest

from mmgate.sim.core import (
    Engine,
    EngineConfig,
    SimRequest,
)
from mmgate.sim.profiles import available_profiles
from support.sim_core import drain, serve


@pytest.mark.parametrize("name", available_profiles())
def test_a_short_prefill_costs_at_least_the_step_floor(name: str) -> None:
    """Kernel launches, scheduling and sampling: no forward step is free, however few its tokens."""
    engine = Engine(name)
    t = engine.profile.step
    assert t.base_ms > 0
    floor = (t.base_ms + t.prefill_fixed_ms) / 1000
    prompt = list(range(2 * engine.block_size + 1))
    cold = serve(engine, SimRequest("cold", prompt, max_tokens=2))
    warm = serve(engine, SimRequest("warm", prompt, max_tokens=2))  # all but the last token hit
    assert warm.steps[0].prefill_tokens == 1
    assert warm.steps[0].duration >= floor
    assert cold.steps[0].duration >= floor
    assert min(s.duration for s in cold.steps + warm.steps) >= t.base_ms / 1000  # decode steps too


def test_small_prefills_cost_more_per_token_on_the_calibrated_profile() -> None:
    """The rtx4060 table: 41 ms for 116 tokens, 246 ms for 1,556 (the floor shows per token)."""

    def per_token(n: int) -> float:
        return (
            serve(Engine("qwen2-vl-2b-rtx4060"), SimRequest("p", list(range(n)), max_tokens=1))
            .steps[0]
            .duration
            / n
        )

    assert per_token(116) > 2 * per_token(1556)


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
