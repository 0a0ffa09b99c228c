"""The thread that owns the reference engine, so the server's event loop never runs the model.

A forward pass on CPU takes milliseconds to seconds and holds the GIL only part of the time; run on
the loop it would stall every other connection (health checks, ``/metrics`` scrapes every 50 ms, the
other streams). So one worker thread makes every call into :class:`~mmgate.refengine.runtime.Engine`
(it is not thread-safe) and the loop only talks to it through a queue one way and
``call_soon_threadsafe`` the other way:

- the loop submits requests, aborts and calls (the encode-only role's work) into an inbox; the
  thread takes them between steps;
- after every step the thread hands the loop one :class:`Step`: the tokens produced, the requests
  the engine refused (a client mistake found while reading the images), the step's KV events, and a
  snapshot of the counters, so ``/metrics`` never reads the engine while it runs.

Requests join the running batch between steps (the engine prefills newcomers, then decodes every
running request in one batched pass), which is continuous batching at the granularity the
engine offers.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from mmgate.errors import RequestError
from mmgate.modelserver.events import KVEvent
from mmgate.modelserver.stats import EngineStats
from mmgate.refengine.runtime import Engine, GenerateRequest, StageSeconds, StepOutput

log = logging.getLogger(__name__)

T = TypeVar("T")

__all__ = ["EngineWorker", "Step"]


@dataclass(frozen=True, slots=True)
class Step:
    """What one turn of the worker produced, handed to the loop in one piece. ``started`` and
    ``ended`` are ``time.monotonic()`` seconds (the loop's clock)."""

    started: float
    ended: float
    outputs: list[StepOutput]
    refused: list[tuple[str, RequestError]]
    events: list[KVEvent]
    stats: EngineStats
    stages: StageSeconds
    failed: BaseException | None = None


@dataclass(frozen=True, slots=True)
class _Add:
    request: GenerateRequest


@dataclass(frozen=True, slots=True)
class _Abort:
    request_id: str


@dataclass(frozen=True, slots=True)
class _Call:
    fn: Callable[[Engine], Any]
    future: asyncio.Future[Any]


_STOP = object()


@dataclass(slots=True)
class _Inbox:
    q: queue.SimpleQueue[object] = field(default_factory=queue.SimpleQueue)

    def put(self, item: object) -> None:
        self.q.put(item)

    def take(self, block: bool) -> list[object]:
        """Everything queued; waits for the first item when ``block``."""
        items: list[object] = []
        if block:
            items.append(self.q.get())
        while True:
            try:
                items.append(self.q.get_nowait())
            except queue.Empty:
                return items


class EngineWorker:
    """Runs ``engine`` on its own thread; ``on_step`` is called on ``loop`` after every step."""

    def __init__(
        self, engine: Engine, loop: asyncio.AbstractEventLoop, on_step: Callable[[Step], None]
    ) -> None:
        self._engine = engine
        self._loop = loop
        self._on_step = on_step
        self._inbox = _Inbox()
        self._thread = threading.Thread(target=self._run, name="mmgate-engine", daemon=True)
        self.stats: EngineStats = engine.stats
        self.stages: StageSeconds = engine.stages
        self.failed: BaseException | None = None

    def start(self) -> None:
        self._thread.start()

    def submit(self, request: GenerateRequest) -> None:
        """Queue a request; its tokens (or its refusal) arrive in later steps."""
        self._inbox.put(_Add(request))

    def abort(self, request_id: str) -> None:
        """Forget a request whose client went away."""
        self._inbox.put(_Abort(request_id))

    def call(self, fn: Callable[[Engine], T]) -> asyncio.Future[T]:
        """Run ``fn(engine)`` on the engine's thread between steps (the encode-only role's work);
        the future holds its result or its exception."""
        future: asyncio.Future[T] = self._loop.create_future()
        if self.failed is not None:  # the thread is gone: nobody would answer
            future.set_exception(RequestError("the engine failed", status=503, type="service_unavailable"))
        else:
            self._inbox.put(_Call(fn, future))
        return future

    async def stop(self, timeout: float = 30.0) -> None:
        """Finish the step in progress and end the thread (waiting in an executor, not on the loop)."""
        if not self._thread.is_alive():
            return
        self._inbox.put(_STOP)
        await asyncio.get_running_loop().run_in_executor(None, self._thread.join, timeout)

    def _run(self) -> None:
        engine = self._engine
        while True:
            refused: list[tuple[str, RequestError]] = []
            for item in self._inbox.take(block=not engine.has_unfinished()):
                if item is _STOP:
                    return
                if isinstance(item, _Abort):
                    engine.abort(item.request_id)
                elif isinstance(item, _Call):
                    self._answer(item)
                elif isinstance(item, _Add):
                    try:
                        engine.add_request(item.request)
                    except RequestError as err:
                        refused.append((item.request.request_id, err))
                    except Exception:  # the engine's bug, not the client's: this request only
                        log.exception("the engine could not take request %s", item.request.request_id)
                        failure = RequestError(
                            "the engine failed on this request", status=500, type="server_error"
                        )
                        refused.append((item.request.request_id, failure))
            started = time.monotonic()
            failed: BaseException | None = None
            outputs: list[StepOutput] = []
            try:
                if engine.has_unfinished():
                    outputs = engine.step()
                events, stats, stages = engine.drain_kv_events(), engine.stats, engine.stages
            except Exception as exc:  # a bug in the engine must not leave every stream hanging
                log.exception("the engine failed; the server now answers 503")
                failed = exc
                events, stats, stages = [], self.stats, self.stages
            step = Step(started, time.monotonic(), outputs, refused, events, stats, stages, failed)
            self._loop.call_soon_threadsafe(self._deliver, step)
            if failed is not None:
                return

    def _answer(self, call: _Call) -> None:
        try:
            result = call.fn(self._engine)
        except Exception as exc:  # RequestError for the client; anything else fails this call only
            self._loop.call_soon_threadsafe(_settle, call.future, None, exc)
        else:
            self._loop.call_soon_threadsafe(_settle, call.future, result, None)

    def _deliver(self, step: Step) -> None:
        self.stats = step.stats
        self.stages = step.stages
        if step.failed is not None:
            self.failed = step.failed
        self._on_step(step)


def _settle(future: asyncio.Future[Any], result: Any, exc: BaseException | None) -> None:
    if future.done():  # its caller was cancelled meanwhile
        return
    if exc is not None:
        future.set_exception(exc)
    else:
        future.set_result(result)
