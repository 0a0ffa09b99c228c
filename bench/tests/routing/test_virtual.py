"""Coroutines driven in virtual time: awaits end on Pending answers the caller settles."""

from __future__ import annotations

from collections.abc import Generator

import pytest

from mmgate_bench.routing.virtual import Outcome, Pending, VirtualTasks


def test_together_runs_side_by_side_and_keeps_order_and_errors() -> None:
    tasks = VirtualTasks()
    answers: list[Pending[int]] = [Pending(), Pending(), Pending()]
    ended: list[Outcome] = []

    async def leg(p: Pending[int]) -> int:
        return await p + 1

    async def flow() -> list[int | BaseException]:
        return await tasks.together([leg(p) for p in answers])

    tasks.spawn(flow(), ended.append)
    assert all(p.waiter is not None for p in answers)  # all three legs started before any answer
    tasks.settle(answers[2], 30)
    tasks.settle(answers[0], error=TimeoutError("late"))
    assert ended == []
    tasks.settle(answers[1], 20)
    ((result, error),) = ended
    assert error is None and result[1:] == [21, 31] and isinstance(result[0], TimeoutError)
    assert not tasks.settle(answers[1], 99)  # a second answer is ignored


def test_an_exception_ends_the_coroutine_with_it() -> None:
    tasks = VirtualTasks()
    ended: list[Outcome] = []
    answer: Pending[int] = Pending()

    async def flow() -> int:
        value = await answer
        raise ValueError(f"bad {value}")

    tasks.spawn(flow(), ended.append)
    tasks.settle(answer, 7)
    ((value, error),) = ended
    assert value is None and isinstance(error, ValueError) and str(error) == "bad 7"


class _Elsewhere:
    """An awaitable of another event loop (what an ``asyncio`` future yields to its loop)."""

    def __await__(self) -> Generator[str, None, None]:
        yield "an asyncio future"


def test_awaiting_anything_but_a_pending_answer_is_refused() -> None:
    async def flow() -> None:
        await _Elsewhere()

    with pytest.raises(TypeError, match="only Pending"):
        VirtualTasks().spawn(flow(), lambda outcome: None)
