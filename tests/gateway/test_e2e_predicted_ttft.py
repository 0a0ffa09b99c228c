"""End to end: the shipped predicted-TTFT config behind the real gateway, with simulated pods.
Streamed answers are routed, and each one's predicted and observed TTFT, and how far apart
they were, show on /metrics per endpoint; a non-streamed answer (whose first byte is its last)
is not counted as a TTFT."""

from __future__ import annotations

import re

import pytest

from support.processes import REPO
from support.stack import chat_body, png, stack

pytestmark = pytest.mark.slow


def _counts(page: str, metric: str) -> dict[str, float]:
    pattern = re.compile(rf'^{metric}_count{{endpoint="([^"]+)"}} (\S+)$', re.M)
    return {endpoint: float(v) for endpoint, v in pattern.findall(page)}


def _sums(page: str, metric: str) -> list[float]:
    return [float(v) for v in re.findall(rf'^{metric}_sum{{endpoint="[^"]+"}} (\S+)$', page, re.M)]


async def test_predicted_and_observed_ttft_per_endpoint_on_metrics() -> None:
    config = (REPO / "examples" / "predicted-ttft.yaml").read_text()
    async with stack(config, pods=2, time_scale=20.0) as s:
        picture = png(3, size=(640, 480))
        for k in range(6):
            reply = await s.post(chat_body(s.model, f"what is in the picture? ({k})", [picture], stream=True))
            assert reply.status == 200, reply.body
        reply = await s.post(chat_body(s.model, "and without streaming?", [picture]))
        assert reply.status == 200, reply.body
        async with s.session.get(s.url + "/metrics") as resp:
            page = await resp.text()
        pods = {u.split("://", 1)[1] for u in s.fleet.urls}
    predicted = _counts(page, "mmgate_predicted_ttft_seconds")
    observed = _counts(page, "mmgate_observed_ttft_seconds")
    errors = _counts(page, "mmgate_ttft_prediction_error_seconds")
    assert sum(predicted.values()) == sum(observed.values()) == 6
    assert predicted == observed == errors and set(predicted) <= pods
    # each answer's own |predicted - observed|: its sum is at least the gap of the two sums
    gap = abs(
        sum(_sums(page, "mmgate_predicted_ttft_seconds")) - sum(_sums(page, "mmgate_observed_ttft_seconds"))
    )
    assert sum(_sums(page, "mmgate_ttft_prediction_error_seconds")) >= gap - 1e-9
    assert all(v > 0 for v in _sums(page, "mmgate_observed_ttft_seconds"))
