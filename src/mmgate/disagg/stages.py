"""The routing headers a request arrives with, as the stages to run for it.

The gateway (gateway-orchestrated mode) reads the headers its own scheduler set; the sidecar reads
those the gateway sent it and keeps only hosts on its allow-list (SSRF protection: a header
naming any other host must never make the sidecar contact it).
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Container, Iterable, Mapping

from mmgate.datalayer.endpoints import EndpointRecord
from mmgate.disagg.orchestrate import StageMetrics, Stages
from mmgate.disagg.plan import parse_hosts, split_host
from mmgate.scheduling.encoder_assignment import LOCAL
from mmgate.scheduling.plugins.encode_filter import EncodeFilter
from mmgate.scheduling.plugins.prefill_filter import PrefillFilter
from mmgate.scheduling.types import ENCODERS_HEADER, PREFILLER_HEADER

log = logging.getLogger("mmgate.disagg")

STAGE_HEADERS = {"encode": ENCODERS_HEADER, "prefill": PREFILLER_HEADER}


class AllowList:
    """The hosts a sidecar may contact: ``host:port`` entries, or ``CIDR:port`` for a pod network
    whose addresses change (``10.244.0.0/16:8000``: any address in it, on that port only)."""

    def __init__(self, entries: Iterable[str]) -> None:
        self.hosts: set[str] = set()
        self.networks: list[tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, int]] = []
        for entry in entries:
            host, port = split_host(entry)
            if "/" in host:
                try:
                    self.networks.append((ipaddress.ip_network(host, strict=False), port))
                except ValueError:
                    raise ValueError(f"not a network: {host!r}") from None
            else:
                self.hosts.add(entry)

    def __contains__(self, entry: object) -> bool:
        if not isinstance(entry, str):
            return False
        if entry in self.hosts:
            return True
        if not self.networks:
            return False
        try:
            host, port = split_host(entry)
            address = ipaddress.ip_address(host)
        except ValueError:
            return False  # a name, or no port: only an exact entry allows it
        return any(address in net and port == p for net, p in self.networks)


def stages_from(
    headers: Mapping[str, str],
    *,
    allow: Container[str] | None = None,
    metrics: StageMetrics | None = None,
) -> Stages:
    """The stages ``headers`` name. With ``allow``, a host not in it is dropped, counted and
    logged (the host, never the request)."""
    found: dict[str, list[str]] = {}
    for stage, name in STAGE_HEADERS.items():
        hosts = parse_hosts(headers.get(name) or "")
        if allow is not None:
            refused = [h for h in hosts if h not in allow and h != LOCAL]
            if refused:
                if metrics is not None:
                    metrics.refused.labels(stage).inc(len(refused))
                named = ", ".join(sorted(set(refused)))
                log.warning("%s: refused host(s) not on the allow-list: %s", name, named)
                hosts = [h for h in hosts if h in allow or h == LOCAL]
        found[stage] = hosts
    return Stages(encoders=found["encode"], prefillers=found["prefill"])


def stages_with_spares(routing: Mapping[str, str], records: Iterable[EndpointRecord]) -> Stages:
    """The stages the scheduler chose (its routing headers), with the fleet's other healthy encode
    and prefill pods as spares for a leg's retry: what the gateway-orchestrated mode runs."""
    stages = stages_from(routing)
    for record in records:
        role = record.endpoint.role
        if not record.health.healthy or role is None:
            continue
        if role in EncodeFilter.roles:
            stages.encoder_spares.append(record.name)
        if role in PrefillFilter.roles and stages.prefillers:
            stages.prefiller_spares.append(record.name)
    return stages
