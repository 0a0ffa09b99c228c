"""``--kv-events-config`` as vLLM reads it, and vLLM's endpoint rules."""

from __future__ import annotations

import pytest

from mmgate.vllm.kv_events_config import binds, offset_endpoint, parse_kv_events_config


def test_config_uses_vllm_names_and_defaults() -> None:
    cfg = parse_kv_events_config('{"enable_kv_cache_events": true}')
    assert cfg.endpoint == "tcp://*:5557"
    assert cfg.replay_endpoint is None
    assert (cfg.buffer_steps, cfg.hwm, cfg.topic) == (10_000, 100_000, "")
    assert cfg.resolved_publisher == "zmq" and cfg.active
    assert not parse_kv_events_config("{}").active
    with pytest.raises(ValueError, match="endpont"):
        parse_kv_events_config('{"endpont": "tcp://*:1"}')
    with pytest.raises(ValueError, match="publisher"):
        parse_kv_events_config('{"enable_kv_cache_events": true, "publisher": "kafka"}')


def test_bind_or_connect_rule_and_rank_offsets() -> None:
    assert binds("tcp://*:5557") and binds("tcp://[::]:5557") and binds("ipc:///tmp/kv")
    assert binds("inproc://kv")
    assert not binds("tcp://10.0.0.5:5557")
    assert offset_endpoint("tcp://*:5557", 3) == "tcp://*:5560"
    assert offset_endpoint("tcp://*:5557", 0) == "tcp://*:5557"
    assert offset_endpoint("inproc://kv", 2) == "inproc://kv_dp2"
    assert offset_endpoint("tcp://127.0.0.1:*", 5) == "tcp://127.0.0.1:*"
