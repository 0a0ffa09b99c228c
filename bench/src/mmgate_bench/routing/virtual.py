"""Coroutines in virtual time: the orchestration's ``async`` code, driven by the DES's event queue.

The E/PD and E/P/D legs are run by :class:`mmgate.disagg.orchestrate.Orchestrator`, the code the
gateway and the sidecar run, which is written for ``asyncio``. The discrete-event benchmark has no
event loop and no wall clock, so it runs that code as plain coroutines: every ``await`` of a leg
ends in a :class:`Pending` that the DES resolves when the leg's answer would arrive in virtual
time, and :meth:`VirtualTasks.resume` continues the coroutine there. Nothing here sleeps or reads
a clock, so a run is as deterministic as the rest of the DES.

Only :class:`Pending` may be awaited (and what awaits it: coroutines, :meth:`VirtualTasks.together`);
an ``asyncio`` future or ``asyncio.sleep`` in the orchestration would be a bug of the seam, and is
reported as one.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Coroutine, Generator, Sequence
from typing import Any, Generic, TypeVar, cast

T = TypeVar("T")

Outcome = tuple[Any, BaseException | None]
"""How a coroutine ended: ``(value, None)`` or ``(None, exception)``."""


class Pending(Generic[T]):
    """An answer that arrives later in virtual time: awaited by a coroutine, settled by the DES."""

    __slots__ = ("error", "settled", "value", "waiter")

    def __init__(self) -> None:
        self.settled = False
        self.value: T | None = None
        self.error: BaseException | None = None
        self.waiter: _Task | None = None

    def __await__(self) -> Generator[Pending[T], None, T]:
        if not self.settled:
            yield self
        if self.error is not None:
            raise self.error
        return cast(T, self.value)


class _Task:
    __slots__ = ("coro", "on_done")

    def __init__(self, coro: Coroutine[Any, Any, Any], on_done: Callable[[Outcome], None]) -> None:
        self.coro = coro
        self.on_done = on_done

    def step(self) -> None:
        """Run until the next unsettled :class:`Pending` (or the end)."""
        try:
            waited = self.coro.send(None)
        except StopIteration as stop:
            self.on_done((stop.value, None))
            return
        except Exception as exc:
            self.on_done((None, exc))
            return
        if not isinstance(waited, Pending):
            self.coro.close()
            raise TypeError(f"a virtual-time coroutine awaited {waited!r}; only Pending answers can be")
        waited.waiter = self


class VirtualTasks:
    """Starts coroutines and resumes them when what they await is settled."""

    def spawn(self, coro: Coroutine[Any, Any, T], on_done: Callable[[Outcome], None]) -> None:
        """Run ``coro`` now until it waits; ``on_done`` gets its outcome when it ends."""
        _Task(coro, on_done).step()

    def settle(self, pending: Pending[T], value: T | None = None, error: BaseException | None = None) -> bool:
        """Give ``pending`` its answer (or ``error``) and continue the coroutine awaiting it.
        False when it was settled already (a leg's answer after its timeout, say)."""
        if pending.settled:
            return False
        pending.settled = True
        pending.value = value
        pending.error = error
        task, pending.waiter = pending.waiter, None
        if task is not None:
            task.step()
        return True

    async def together(self, calls: Sequence[Awaitable[T]]) -> list[T | BaseException]:
        """Every call's result (or exception) in order, the calls running side by side: the
        virtual counterpart of ``asyncio.gather(..., return_exceptions=True)``."""
        results: list[T | BaseException] = [RuntimeError("not finished")] * len(calls)
        left = len(calls)
        joined: Pending[None] = Pending()

        def done(i: int, outcome: Outcome) -> None:
            nonlocal left
            value, error = outcome
            results[i] = error if error is not None else value
            left -= 1
            if left == 0:
                self.settle(joined)

        for i, call in enumerate(calls):
            self.spawn(_awaiting(call), functools.partial(done, i))
        if left:
            await joined
        return results


async def _awaiting(call: Awaitable[T]) -> T:
    return await call
