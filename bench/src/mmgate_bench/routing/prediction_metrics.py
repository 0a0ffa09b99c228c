"""Predicted-TTFT error over HTTP, read from the gateway's own histogram.

In discrete-event mode every request carries the prediction made for it, so the report takes
exact per-request errors. Over HTTP the client sees only the answer: the prediction lives in the
gateway, which pairs it with the observed first byte and counts ``|predicted - observed|`` per
endpoint in ``mmgate_ttft_prediction_error_seconds`` — what an operator sees. A rung's share is
the difference of two scrapes (before and after it), and its median is read off the buckets the
way Prometheus' ``histogram_quantile`` does: linearly within the bucket that holds the rank. The
figure is therefore only as fine as the buckets (a few milliseconds at the low end); the report
says which source a number came from.
"""

from __future__ import annotations

from collections.abc import Mapping

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

ERROR_HISTOGRAM = "mmgate_ttft_prediction_error_seconds"

Buckets = dict[float, float]
"""Cumulative counts by upper bound (``le``), one endpoint's histogram."""


def parse_error_buckets(text: str) -> dict[str, Buckets]:
    """Per endpoint, the cumulative bucket counts of the error histogram in Prometheus text."""
    out: dict[str, Buckets] = {}
    for family in text_string_to_metric_families(text):
        if family.name != ERROR_HISTOGRAM:
            continue
        for sample in family.samples:
            if sample.name.endswith("_bucket"):
                le = float(sample.labels["le"])
                out.setdefault(sample.labels.get("endpoint", ""), {})[le] = sample.value
    return out


async def scrape_error_buckets(session: aiohttp.ClientSession, url: str) -> dict[str, Buckets]:
    """The router's error histogram; empty when it has none (a peer router, or no predictions)."""
    try:
        async with session.get(url.rstrip("/") + "/metrics") as resp:
            if resp.status != 200:
                return {}
            text = await resp.text()
    except aiohttp.ClientError:
        return {}
    try:
        return parse_error_buckets(text)
    except ValueError:  # not Prometheus text (a peer's /metrics may be anything)
        return {}


def difference(
    after: Mapping[str, Buckets], before: Mapping[str, Buckets], scale: float = 1.0
) -> dict[str, Buckets]:
    """What was counted between two scrapes, per endpoint, with bounds multiplied by ``scale``
    (a time-scaled run's wall seconds to simulated seconds); endpoints with nothing new dropped."""
    out: dict[str, Buckets] = {}
    for endpoint, buckets in after.items():
        earlier = before.get(endpoint, {})
        delta = {le * scale: count - earlier.get(le, 0.0) for le, count in buckets.items()}
        if max(delta.values(), default=0.0) > 0:
            out[endpoint] = delta
    return out


def merged(per_endpoint: Mapping[str, Buckets]) -> Buckets:
    """All endpoints' buckets added up (they share bounds: one histogram)."""
    total: Buckets = {}
    for buckets in per_endpoint.values():
        for le, count in buckets.items():
            total[le] = total.get(le, 0.0) + count
    return total
