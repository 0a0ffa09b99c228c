"""The simulated pod's adapter slots: LRU residency, load cost, waiting when every slot is busy."""

from __future__ import annotations

import pytest

from mmgate.sim.cli import lora_module
from mmgate.sim.lora import LoraSlots
from mmgate.sim.spec import PodSpec


def test_resident_adapters_cost_nothing_and_the_idle_least_recent_is_evicted() -> None:
    slots = LoraSlots({"a": "/a", "b": "/b", "c": "/c"}, max_loras=2, load_s=0.5)
    assert slots.acquire("a") == 0.5 and slots.acquire("a") == 0.0  # loaded once
    assert slots.acquire("b") == 0.5
    assert slots.running == ["a", "b"]
    assert slots.acquire("c") is None  # both slots busy: the request waits
    slots.release("b")
    assert slots.acquire("c") == 0.5 and slots.resident == ["a", "c"] and slots.evictions == 1
    slots.release("a")
    slots.release("a")
    slots.release("c")
    assert slots.running == [] and slots.resident == ["a", "c"]  # loaded adapters stay until evicted
    slots.wait("b")
    assert slots.waiting == ["b"]
    slots.wait("b", -1)
    assert slots.waiting == []


def test_lora_flags_and_spec_checks() -> None:
    assert lora_module("sql=/x/sql") == ("sql", "/x/sql")
    assert lora_module('{"name": "sql", "path": "/x/sql", "base_model_name": "m"}') == ("sql", "/x/sql")
    for bad in ("sql", "=/x", '{"name": 1}', "{nope"):
        with pytest.raises(ValueError, match="--lora-modules"):
            lora_module(bad)
    with pytest.raises(ValueError, match="max_loras"):
        PodSpec(lora_modules={"a": "/a"}, max_loras=0).validate()
    with pytest.raises(ValueError, match="without commas"):
        PodSpec(lora_modules={"a,b": "/a"}).validate()
