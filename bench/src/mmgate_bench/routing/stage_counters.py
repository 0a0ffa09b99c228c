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
OUTCOME = "outcome:"
REASON = "reason:"
"""Prefixes of :func:`parse_stage_counters`'s keys of encode decisions, by outcome and by reason."""


def parse_stage_counters(text: str) -> Counter[str]:
    """From one process's Prometheus text: the encode decisions counted per outcome (``tier``,
    ``local``, ``split``; keys :data:`OUTCOME` + outcome) and per reason (:data:`REASON` +
    reason), and under :data:`FALLBACKS` the stages that fell back."""
    out: Counter[str] = Counter()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "mmgate_encode_decisions_total":
                out[OUTCOME + sample.labels.get("outcome", "")] += int(sample.value)
                out[REASON + sample.labels.get("reason", "")] += int(sample.value)
            elif sample.name == "mmgate_disagg_fallbacks_total":
                out[FALLBACKS] += int(sample.value)
    return out


def by_prefix(counts: Counter[str], prefix: str) -> dict[str, int]:
    """The positive counts whose key starts with ``prefix``, keyed by the rest, sorted."""
    return {k[len(prefix) :]: v for k, v in sorted(counts.items()) if k.startswith(prefix) and v > 0}


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
