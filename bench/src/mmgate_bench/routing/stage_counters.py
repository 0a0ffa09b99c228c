"""What the gateway (and, in sidecar mode, each routing sidecar) counted about a disaggregated
request's stages during a rung of the HTTP run: where the media were encoded
(``mmgate_encode_decisions_total{outcome}``, ``adaptive-encode-decider``) and the stages that fell
back (``mmgate_disagg_fallbacks_total``: whoever ran the legs counts them). The discrete-event mode
reads the same from its records; over HTTP the client cannot see them, the processes' ``/metrics``
can."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

FALLBACKS = "fallbacks"
"""The key of :func:`parse_stage_counters`'s count of stages that fell back."""


def parse_stage_counters(text: str) -> Counter[str]:
    """Per encode outcome (``tier``, ``local``, ``split``) the decisions counted, and under
    :data:`FALLBACKS` the stages that fell back, from one process's Prometheus text."""
    out: Counter[str] = Counter()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "mmgate_encode_decisions_total":
                out[sample.labels.get("outcome", "")] += int(sample.value)
            elif sample.name == "mmgate_disagg_fallbacks_total":
                out[FALLBACKS] += int(sample.value)
    return out


async def scrape_stage_counters(session: aiohttp.ClientSession, urls: Sequence[str]) -> Counter[str]:
    """:func:`parse_stage_counters` summed over the processes at ``urls`` (a process that does not
    answer, or answers something else than Prometheus text, counts nothing)."""
    total: Counter[str] = Counter()
    for url in urls:
        try:
            async with session.get(url.rstrip("/") + "/metrics") as resp:
                if resp.status != 200:
                    continue
                text = await resp.text()
        except aiohttp.ClientError:
            continue
        try:
            total.update(parse_stage_counters(text))
        except ValueError:
            continue
    return total
