"""``lora-affinity-scorer``: loaded 1.0, room 0.8, waiting 0.6, otherwise 0 (llm-d's values)."""

from __future__ import annotations

import random
from collections.abc import Collection

from mmgate.scheduling import EndpointState, Metrics, PluginHandle, SchedulingRequest
from mmgate.scheduling.contracts import NoParams
from mmgate.scheduling.plugins.lora_affinity_scorer import LoraAffinityScorer
from mmgate.vllm.lora import Adapter, LoraState
from support.views import view

SERVED = {"sql": Adapter("base", "/a/sql"), "chat": Adapter("base", "/a/chat")}
SCORER = LoraAffinityScorer("lora", NoParams(), PluginHandle(random.Random(0)))


def ep(
    name: str, running: Collection[str] = (), waiting: Collection[str] = (), max_loras: int = 2
) -> EndpointState:
    state = LoraState(SERVED, frozenset(running), frozenset(waiting), max_loras)
    return EndpointState(name, metrics=Metrics(lora=state))


def scores(model: str, endpoints: list[EndpointState]) -> list[float]:
    return SCORER.score(SchedulingRequest(view("hi", model=model), "r"), endpoints)


def test_loaded_then_room_then_waiting_then_busy() -> None:
    endpoints = [
        ep("loaded:1", running={"sql", "chat"}),
        ep("room:1", running={"chat"}),
        ep("waiting:1", running={"chat"}, waiting={"sql"}, max_loras=1),
        ep("busy:1", running={"chat"}, max_loras=1),
        EndpointState("unscraped:1"),
    ]
    assert scores("sql", endpoints) == [1.0, 0.8, 0.6, 0.0, 0.0]


def test_a_base_model_or_unknown_adapter_prefers_nothing() -> None:
    endpoints = [ep("a:1", running={"sql"}), ep("b:1", running={"chat"}, max_loras=1)]
    assert scores("base", endpoints) == [1.0, 1.0]
    assert scores("not-an-adapter", endpoints) == [1.0, 1.0]


def test_stale_metrics_count_as_unknown() -> None:
    request = SchedulingRequest(view("hi", model="sql"), "r")
    request.now, request.staleness_s = 10.0, 2.0
    fresh = EndpointState("fresh:1", metrics=Metrics(lora=LoraState(SERVED, max_loras=1), scraped_at=9.0))
    stale = EndpointState("stale:1", metrics=Metrics(lora=LoraState(SERVED, frozenset({"sql"}), max_loras=1)))
    assert SCORER.score(request, [fresh, stale]) == [0.8, 0.0]
