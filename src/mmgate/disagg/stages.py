"""The routing headers a request arrives with, as the stages to run for it.

The gateway (gateway-orchestrated mode) reads the headers its own scheduler set; the sidecar reads
those the gateway sent it and keeps only hosts on its allow-list (SSRF protection: a header
naming any other host must never make the sidecar contact it).
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping

from mmgate.disagg.orchestrate import StageMetrics, Stages
from mmgate.disagg.plan import parse_hosts
from mmgate.scheduling.types import ENCODERS_HEADER, PREFILLER_HEADER

log = logging.getLogger("mmgate.disagg")

STAGE_HEADERS = {"encode": ENCODERS_HEADER, "prefill": PREFILLER_HEADER}


def stages_from(
    headers: Mapping[str, str],
    *,
    allow: Collection[str] | None = None,
    metrics: StageMetrics | None = None,
) -> Stages:
    """The stages ``headers`` name. With ``allow``, a host not in it is dropped, counted and
    logged (the host, never the request)."""
    found: dict[str, list[str]] = {}
    for stage, name in STAGE_HEADERS.items():
        hosts = parse_hosts(headers.get(name) or "")
        if allow is not None:
            refused = [h for h in hosts if h not in allow]
            if refused:
                if metrics is not None:
                    metrics.refused.labels(stage).inc(len(refused))
                named = ", ".join(sorted(set(refused)))
                log.warning("%s: refused host(s) not on the allow-list: %s", name, named)
                hosts = [h for h in hosts if h in allow]
        found[stage] = hosts
    return Stages(encoders=found["encode"], prefillers=found["prefill"])
