"""The retry budget on a fake clock: capped by ratio plus floor, recovering as the window slides."""

from __future__ import annotations

from mmgate.control.retry_budget import RetryBudget


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_retries_are_capped_by_ratio_plus_floor_and_recover_over_time() -> None:
    clock = Clock()
    budget = RetryBudget(ratio=0.2, min_per_s=0.5, window_s=10.0, clock=clock)
    for _ in range(100):
        budget.on_request()
    # 0.2 x 100 requests + 0.5/s x 10 s = 25 retries in the window, then no more.
    granted = sum(budget.try_retry() for _ in range(40))
    assert granted == 25
    clock.now = 6.0  # half a window later the older half still counts
    assert not budget.try_retry()
    clock.now = 30.0  # a quiet window later the budget is back to its floor
    assert sum(budget.try_retry() for _ in range(10)) == 5
