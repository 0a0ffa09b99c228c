"""The engine's entry points: requests it refuses."""

from __future__ import annotations

import pytest

from mmgate.sim.core import (
    Engine,
    EngineConfig,
    MediaSpan,
    SimRequest,
)


def test_bad_requests_are_rejected() -> None:
    engine = Engine("fast", EngineConfig(num_gpu_blocks=5))
    with pytest.raises(ValueError, match="KV blocks"):
        engine.add_request(SimRequest("big", list(range(100)), max_tokens=1), 0.0)
    with pytest.raises(ValueError, match="outside"):
        engine.add_request(SimRequest("x", [1, 2], [MediaSpan("i", 1, 5)]), 0.0)
    engine.add_request(SimRequest("ok", [1, 2]), 0.0)
    with pytest.raises(ValueError, match="already"):
        engine.add_request(SimRequest("ok", [1, 2]), 0.0)
    with pytest.raises(ValueError, match="max_model_len"):
        short = Engine("fast", EngineConfig(max_model_len=50))
        short.add_request(SimRequest("x", [1] * 40, max_tokens=20), 0.0)
    with pytest.raises(ValueError, match="max_num_seqs"):
        Engine("fast", EngineConfig(max_num_batched_tokens=8, max_num_seqs=16))
