"""Runs one pod's pure engine in real time and hands its tokens to the waiting HTTP streams.

The engine is clock-free: ``step(now)`` says how long the step takes on the simulated GPU. The
driver runs steps back to back while there is work, sleeping each step's duration (× slowdown ×
time scale) against a running deadline so sleep overshoot does not accumulate, and delivers every
token a step produced when the step ends. A streaming response registers a sink that writes the
SSE bytes to its socket right there, so a token costs no task wake-up at all. Time in metrics is
simulated seconds (wall seconds / time scale), as a real pod would report it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from mmgate.sim.core import Engine
from mmgate.sim.core.types import SimRequest, StepOutput
from mmgate.sim.faults import Faults
from mmgate.sim.metrics import PodMetrics

log = logging.getLogger(__name__)

# How far behind schedule the loop may fall before it stops trying to catch up (then it drifts).
MAX_CATCH_UP_S = 0.5


@dataclass(slots=True, eq=False)
class Flight:
    """One request in the engine, as its HTTP handler sees it."""

    request_id: str
    prompt_tokens: int
    arrival: float  # simulated seconds, before preprocessing (vLLM's arrival_time)
    queued_at: float = 0.0  # handed to the engine's waiting queue (vLLM's QUEUED event)
    scheduled_at: float | None = None  # start of the step that first scheduled it (SCHEDULED)
    emitted: int = 0
    cached_tokens: int = 0
    finished: bool = False
    reason: str = "length"
    first_token_at: float | None = None
    last_token_at: float | None = None
    # When set, the driver hands new tokens straight to this (no task wake-up per token); the
    # handler is then woken only when the request finishes.
    sink: Callable[[Flight], None] | None = field(default=None, repr=False)
    _waiter: asyncio.Future[None] | None = field(default=None, repr=False)

    async def wait(self) -> None:
        """Until the next step that gives this request tokens or finishes it."""
        if self.finished:
            return
        loop = asyncio.get_running_loop()
        self._waiter = loop.create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None

    def wake(self) -> None:
        w = self._waiter
        if w is not None and not w.done():
            w.set_result(None)


class Driver:
    """The engine loop of one pod."""

    def __init__(
        self,
        engine: Engine,
        *,
        metrics: PodMetrics,
        faults: Faults,
        time_scale: float = 1.0,
        on_step: Callable[[StepOutput], None] | None = None,
    ) -> None:
        self.engine = engine
        self.metrics = metrics
        self.faults = faults
        self.time_scale = time_scale
        self.on_step = on_step
        self.flights: dict[str, Flight] = {}
        self.steps = 0
        self._loop = asyncio.get_running_loop()
        self._t0 = self._loop.time()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.failed: Exception | None = None

    def now(self) -> float:
        """Simulated seconds since the pod started."""
        return (self._loop.time() - self._t0) / self.time_scale

    def start(self) -> None:
        self._task = self._loop.create_task(self._run(), name="sim-driver")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        for f in self.flights.values():
            f.finished = True
            f.reason = "abort"
            f.wake()

    async def preprocess(self, request: SimRequest) -> float:
        """Wait out the frontend's preprocessing (the HF processor; queued per pod, cached per item)
        and return the request's arrival time in simulated seconds."""
        arrival = self.now()
        delay = self.engine.preprocess(request, arrival)
        if delay > 0:
            await asyncio.sleep(delay * self.faults.settings.slowdown * self.time_scale)
        return arrival

    def submit(self, request: SimRequest, arrival: float | None = None) -> Flight:
        """Hand a preprocessed request to the engine (``ValueError`` if it can never run here,
        ``RuntimeError`` once the engine has failed)."""
        if self.failed is not None:
            raise RuntimeError(f"the simulated engine failed: {self.failed!r}")
        now = self.now()
        self.engine.add_request(request, now)
        flight = Flight(
            request.request_id, len(request.token_ids), now if arrival is None else arrival, queued_at=now
        )
        self.flights[request.request_id] = flight
        self.metrics.touch()
        self._wake.set()
        return flight

    def abort(self, flight: Flight) -> None:
        """The client went away: free the engine's resources for it."""
        if self.flights.pop(flight.request_id, None) is not None and not flight.finished:
            self.engine.abort(flight.request_id)
            flight.finished = True
            flight.reason = "abort"
            self.metrics.request_success["abort"] += 1
            self.metrics.touch()

    def nudge(self) -> None:
        """Re-check faults (e.g. a stall was lifted through the admin endpoint)."""
        self._wake.set()

    async def _run(self) -> None:
        try:
            await self._loop_steps()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a bug in the engine must not leave every stream hanging
            log.exception("simulated engine failed; the pod now answers 503")
            self.failed = exc
            for f in list(self.flights.values()):
                f.finished = True
                f.reason = "abort"
                f.wake()
            self.flights.clear()

    async def _loop_steps(self) -> None:
        loop = self._loop
        deadline = loop.time()
        while True:
            if not self.engine.has_work():
                self._wake.clear()
                await self._wake.wait()
                deadline = loop.time()
                continue
            if self.faults.stalled():
                self._wake.clear()
                left = self.faults.stall_remaining()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), None if left in (None, float("inf")) else left)
                deadline = loop.time()
                continue
            started = loop.time()
            step_start = self.now()
            out = self.engine.step(step_start)
            self.steps += 1
            sim_s = out.duration * self.faults.settings.slowdown
            deadline += sim_s * self.time_scale
            late = loop.time() - deadline
            if late > MAX_CATCH_UP_S:
                deadline = loop.time()
            if late < 0:
                await asyncio.sleep(-late)
            else:
                await asyncio.sleep(0)  # let I/O run even when the loop is behind
            self._deliver(out, step_start)
            m = self.metrics
            m.driver_lag = max(0.0, late) / self.time_scale
            m.busy_sim_s += sim_s
            m.encoder_s += out.encoder_seconds
            m.busy_wall_s += (loop.time() - started) / self.time_scale

    def _deliver(self, out: StepOutput, step_start: float) -> None:
        now = self.now()
        m = self.metrics
        flights = self.flights
        ttft, itl = m.ttft, m.itl
        for rid in out.scheduled:
            f = flights.get(rid)
            if f is not None and f.scheduled_at is None:
                f.scheduled_at = step_start
        for rid in out.first_token:
            f = flights.get(rid)
            if f is not None:
                f.first_token_at = f.last_token_at = now
                f.emitted += 1
                ttft.observe(now - f.arrival)
                if f.sink is None:
                    f.wake()
                else:
                    f.sink(f)
        for rid in out.next_tokens:
            f = flights.get(rid)
            if f is not None and f.last_token_at is not None:
                itl.observe(now - f.last_token_at)
                f.last_token_at = now
                f.emitted += 1
                if f.sink is None:
                    f.wake()
                else:
                    f.sink(f)
        for done in out.finished:
            f = flights.pop(done.request_id, None)
            if f is None:
                continue
            f.finished = True
            f.reason = done.finish_reason
            f.cached_tokens = done.cached_tokens
            m.finished(f.arrival, f.queued_at, f.scheduled_at, f.first_token_at, now, f.emitted)
            m.request_success[done.finish_reason] = m.request_success.get(done.finish_reason, 0) + 1
            f.wake()
        if self.on_step is not None:
            self.on_step(out)
        m.touch()
