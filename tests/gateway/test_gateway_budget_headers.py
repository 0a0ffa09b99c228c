"""The retry budget and the header rules, as pure functions."""

from __future__ import annotations

from mmgate.control.retry_budget import RetryBudget
from mmgate.gateway.headers import relay_headers, request_id_from, upstream_headers


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


def test_client_request_ids_are_kept_only_when_safe() -> None:
    assert request_id_from({"x-request-id": "abc-123.X:y_z"}) == "abc-123.X:y_z"
    for unsafe in ("", "has space", "a" * 129, "new\nline", "ünï"):
        generated = request_id_from({"x-request-id": unsafe})
        assert generated != unsafe and len(generated) == 32


def test_upstream_and_response_header_rules() -> None:
    sent = upstream_headers(
        [
            ("Authorization", "Bearer k"),
            ("Connection", "keep-alive"),
            ("Host", "gw"),
            ("X-Prefiller-Host-Port", "evil:1"),
            ("x-mmgate-anything", "1"),
            ("X-Request-Id", "client"),
            ("Content-Type", "application/json"),
        ],
        "rid",
    )
    assert sent == [
        ("Authorization", "Bearer k"),
        ("Content-Type", "application/json"),
        ("x-request-id", "rid"),
    ]
    shown = relay_headers(
        [("Content-Type", "text/event-stream"), ("Transfer-Encoding", "chunked"), ("x-mmgate-endpoint", "x")]
    )
    assert shown == ([("Content-Type", "text/event-stream")], None)
    shown = relay_headers(
        [("Content-Length", "12"), ("Set-Cookie", "a"), ("Set-Cookie", "b"), ("Server", "x")]
    )
    assert shown == ([("Set-Cookie", "a"), ("Set-Cookie", "b")], 12)  # repeated headers kept
