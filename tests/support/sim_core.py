"""Helpers for the engine tests: requests with an image run, and driving an engine to idle."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from mmgate.sim.core import Engine, FinishedRequest, MediaSpan, SimRequest, StepOutput

IMG = 151_655  # any placeholder token id


def mm_request(rid: str, text: int, image: str | None, tokens: int = 64, max_tokens: int = 4, tail: int = 8):
    """``text`` prompt tokens (ids 1..), an image run, then ``tail`` more text tokens."""
    ids = list(range(1, text + 1))
    items = []
    if image is not None:
        items.append(MediaSpan(image, len(ids), tokens))
        ids += [IMG] * tokens
    ids += list(range(1000, 1000 + tail))
    return SimRequest(rid, ids, items, max_tokens)


@dataclass
class Run:
    steps: list[StepOutput] = field(default_factory=list)
    tokens: Counter[str] = field(default_factory=Counter)
    finished: dict[str, FinishedRequest] = field(default_factory=dict)
    now: float = 0.0


def drain(engine: Engine, run: Run | None = None, max_steps: int = 100_000) -> Run:
    run = run or Run()
    for _ in range(max_steps):
        if not engine.has_work():
            return run
        out = engine.step(run.now)
        run.now += out.duration
        run.steps.append(out)
        run.tokens.update(out.first_token)
        run.tokens.update(out.next_tokens)
        for f in out.finished:
            run.finished[f.request_id] = f
    raise AssertionError("engine did not drain")


def serve(engine: Engine, *requests: SimRequest) -> Run:
    """Requests one after another, each alone in the engine."""
    run = Run()
    for req in requests:
        engine.add_request(req, run.now)
        drain(engine, run)
    return run
