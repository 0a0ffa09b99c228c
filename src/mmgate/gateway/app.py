"""Assembling a gateway from a config file, and running it on uvloop until told to stop.

:func:`build_gateway` is shared by ``mmgate serve``, ``mmgate demo`` and the end-to-end tests, so
all three run exactly the same wiring: config → scheduler → picker → controller → gateway.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from mmgate.config import GatewayConfig, MmgateSection
from mmgate.config.strict import ConfigError
from mmgate.control.admission import AdmissionSettings
from mmgate.control.apikeys import KeyStore
from mmgate.control.circuit_breaker import BreakerSettings
from mmgate.control.controller import ControlSettings
from mmgate.control.flow import flow_settings_of
from mmgate.control.parser import make_parser
from mmgate.control.scheduler_picker import SchedulerPicker
from mmgate.datalayer.endpoints import Endpoint
from mmgate.datalayer.index.memory import AffinityIndex
from mmgate.datalayer.kubernetes import KubernetesSettings
from mmgate.datalayer.kvevents.settings import kv_events_settings_of
from mmgate.datalayer.layer import DataLayerConfig
from mmgate.disagg.orchestrate import OrchestrationSettings
from mmgate.gateway.config_check import endpoint_of
from mmgate.gateway.plugin_times import PluginTimes
from mmgate.gateway.proxy import ProxySettings
from mmgate.gateway.server import Gateway, GatewaySettings
from mmgate.http.server import HttpServer
from mmgate.process import wait_for_signal
from mmgate.request.limits import Limits
from mmgate.request.urlprobe import UrlProbeSettings
from mmgate.scheduling import build_scheduler
from mmgate.scheduling.registry import PluginRegistry
from mmgate.scheduling.tiers import TierSizer
from mmgate.tls import client_context
from mmgate.tokens import PricingConfig

if TYPE_CHECKING:  # each imported only when configured: OpenTelemetry, redis-py
    from mmgate.datalayer.index.redis_mirror import RedisIndexes
    from mmgate.gateway.tracing import Tracing

log = logging.getLogger("mmgate.gateway")


def endpoints_of(section: MmgateSection) -> list[Endpoint]:
    return [endpoint_of(item) for item in section.endpoints]


def kubernetes_of(section: MmgateSection) -> KubernetesSettings | None:
    """The ``mmgate.kubernetes`` section as discovery settings (``ConfigError`` naming the key)."""
    spec = section.kubernetes
    if spec is None:
        return None
    try:
        return KubernetesSettings(
            namespace=spec.namespace,
            pod_selector=spec.podSelector,
            target_ports=tuple(spec.targetPorts),
            pool=spec.inferencePool,
            kubeconfig=spec.kubeconfig,
            role_label=spec.roleLabel,
        )
    except ValueError as exc:
        raise ConfigError(str(exc), path="mmgate.kubernetes") from None


def shared_index_of(section: MmgateSection) -> RedisIndexes | None:
    """The Redis-mirrored index provider for ``mmgate.sharedIndex`` (None: in-memory indexes)."""
    spec = section.sharedIndex
    if spec is None:
        return None
    from mmgate.datalayer.index.redis_mirror import RedisIndexes, SharedIndexSettings

    return RedisIndexes(SharedIndexSettings(spec.redis, prefix=spec.keyPrefix, outbox_limit=spec.outboxLimit))


def keys_of(section: MmgateSection) -> KeyStore | None:
    """The API keys when ``mmgate.auth`` is set (raises ``ConfigError`` for an unusable file)."""
    spec = section.auth
    if spec is None:
        return None
    try:
        keys = KeyStore(Path(spec.keysFile), check_every_s=spec.reloadIntervalS)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot use the keys file: {exc}", path="mmgate.auth.keysFile") from None
    log.info("authentication on: %d API keys from %s", len(keys), spec.keysFile)
    return keys


def url_probe_of(section: MmgateSection) -> UrlProbeSettings | None:
    spec = section.urlProbe
    if spec is None:
        return None
    if spec.allowPrivate:
        log.warning("mmgate.urlProbe.allowPrivate: URL probes may reach private and loopback addresses")
    return UrlProbeSettings(
        enabled=True,
        allow_hosts=tuple(spec.allowHosts),
        allow_private=spec.allowPrivate,
        max_bytes=spec.maxBytes,
        timeout_s=spec.timeoutS,
        cache_entries=spec.cacheEntries,
        cache_ttl_s=spec.cacheTtlS,
    )


def tracing_of(section: MmgateSection) -> Tracing | None:
    """The tracer for ``mmgate.tracing`` (``None`` when the section is absent: OpenTelemetry is
    then never imported). Raises ``ConfigError`` when the ``tracing`` extra is not installed (the
    section's values were checked with the file)."""
    spec = section.tracing
    if spec is None:
        return None
    try:
        from mmgate.gateway.tracing import Tracing, TracingSettings
    except ImportError as exc:
        raise ConfigError(tracing_import_problem(exc), path="mmgate.tracing") from None
    return Tracing(
        TracingSettings(endpoint=spec.endpoint, service_name=spec.serviceName, sample_ratio=spec.sampleRatio)
    )


def tracing_import_problem(exc: ImportError) -> str:
    """What to do when OpenTelemetry does not import. A module that is absent means the extra is
    not installed; a name missing from a module that is there means a broken install: xds-protos
    (the ``extproc`` extra) ships its own, older copies of the ``opentelemetry.proto`` modules
    into the same package folder, and whichever of the two packages pip installs last owns them."""
    if "cannot import name" in str(exc):
        return (
            f"tracing cannot load OpenTelemetry ({exc}); another package (xds-protos, from the extproc "
            "extra) overwrote opentelemetry-proto's files: "
            "pip install --force-reinstall --no-deps opentelemetry-proto"
        )
    return f"tracing needs OpenTelemetry ({exc.name} is missing): pip install 'mmgate[tracing]'"


def settings_of(section: MmgateSection) -> GatewaySettings:
    """The ``mmgate:`` section as runtime settings (flags were already applied to it).

    Raises ``ConfigError`` when ``upstreamTLS.caFile`` is missing or unusable.
    """
    tls = section.upstreamTLS
    if tls.insecureSkipVerify:
        log.warning("mmgate.upstreamTLS.insecureSkipVerify: certificates of https endpoints are NOT verified")
    ssl_context = client_context(tls.caFile, insecure_skip_verify=tls.insecureSkipVerify)
    return GatewaySettings(
        host=section.host,
        port=section.port,
        data=DataLayerConfig(
            endpoints=endpoints_of(section),
            endpoints_file=Path(section.endpointsFile) if section.endpointsFile else None,
            kubernetes=kubernetes_of(section),
            scrape_interval_s=section.scrapeIntervalMs / 1000.0,
            staleness_s=section.metricsStalenessMs / 1000.0,
            ssl_context=ssl_context,
            kv_events=kv_events_settings_of(section),
        ),
        proxy=ProxySettings(
            request_timeout_s=section.requestTimeoutS,
            read_timeout_s=section.readTimeoutS,
            pool_limit=section.upstreamPoolLimit,
            ssl_context=ssl_context,
            debug_scores=section.debugHeaders,
        ),
        control=ControlSettings(
            max_attempts=section.maxRetries + 1,
            breaker=BreakerSettings(
                consecutive_failures=section.outlierDetection.consecutiveFailures,
                base_ejection_s=section.outlierDetection.baseEjectionS,
                max_ejection_s=section.outlierDetection.maxEjectionS,
            ),
            max_inflight=section.admission.maxInflight,
            admission=AdmissionSettings(
                max_queue=section.admission.maxQueue,
                queue_timeout_s=section.admission.queueTimeoutS,
                per_client_inflight=section.admission.perClientInflight,
            ),
        ),
        max_body_bytes=section.limits.maxBodyBytes,
        body_timeout_s=section.bodyTimeoutS,
        header_timeout_s=section.headerTimeoutS,
        send_timeout_s=section.sendTimeoutS,
        access_log=section.accessLog,
        admin_port=section.adminPort,
        orchestration=orchestration_of(section),
        url_probe=url_probe_of(section),
    )


def orchestration_of(section: MmgateSection) -> OrchestrationSettings | None:
    """The legs' settings when the gateway runs them (``orchestrator: gateway``), else ``None``."""
    d = section.disaggregation
    if d.orchestrator != "gateway":
        return None
    return OrchestrationSettings(
        encode_timeout_s=d.encodeTimeoutS,
        prefill_timeout_s=d.prefillTimeoutS,
        stage_retries=d.stageRetries,
        fallback=d.fallback,
    )


def build_gateway(
    config: GatewayConfig,
    *,
    registry: PluginRegistry | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> Gateway:
    """A gateway for ``config`` (not started); ``registry``: the plugin types its scheduler may
    use (default: the built-in ones); ``clock``: its monotonic time (tests move it to end a
    circuit-breaker ejection without waiting). Raises ``ConfigError``/``ValueError`` on bad config."""
    section = config.mmgate
    shared = shared_index_of(section)
    blocks: AffinityIndex[Hashable] | None = AffinityIndex() if kv_events_settings_of(section) else None
    times = PluginTimes()
    scheduler = build_scheduler(
        config.picker, mmgate=section, registry=registry, indexes=shared, kv_blocks=blocks, plugin_timer=times
    )
    refuse = section.validation.modalities
    family = section.pricing.family
    pricing = PricingConfig(family=family, refuse_unserved=refuse) if family else PricingConfig()
    picker = SchedulerPicker(scheduler, pricing=pricing)
    limits = replace(
        Limits.from_config(section.limits, section.validation), own_media_uuids=section.mediaUuids
    )
    settings = settings_of(section)
    settings.data.shared_index = shared
    settings.data.kv_block_index = blocks
    flow = flow_settings_of(config.picker, section)
    gateway = Gateway(
        settings, picker, make_parser(limits), clock=clock, keys=keys_of(section),
        tracing=tracing_of(section), flow=flow, pricing=pricing,
    )  # fmt: skip
    times.register(gateway.telemetry.registry)
    sizers = [p for p in scheduler.plugins.values() if isinstance(p, TierSizer)]
    if sizers:  # the first one's view of the tiers (one encode decider per config)
        gateway.telemetry.tiers_from(sizers[0].tier_demand)
    return gateway


@dataclass(slots=True)
class Running:
    """A started gateway: where it listens and how to stop it."""

    gateway: Gateway
    server: HttpServer
    host: str
    port: int
    admin: HttpServer | None = None
    admin_port: int | None = None
    shutdown_timeout_s: float = 10.0

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    async def stop(self) -> None:
        """Stop listening, let in-flight responses finish, then stop the gateway."""
        if self.admin is not None:
            await self.admin.close(1.0)
            self.admin = None
        await self.server.close(self.shutdown_timeout_s)
        await self.gateway.stop()


async def start(
    gateway: Gateway, host: str | None = None, port: int | None = None, *, reuse_port: bool = False
) -> Running:
    """Start the gateway, bind and serve (``port=0`` picks a free port; :attr:`Running.port` tells
    which). ``reuse_port`` lets several worker processes listen on the same port (``--workers``).
    """
    host = host if host is not None else gateway.settings.host
    port = port if port is not None else gateway.settings.port
    limits = gateway.settings.server_limits()
    await gateway.start()
    server = HttpServer(gateway.dispatcher(gateway.routes()), limits, on_refusal=gateway.refused)
    admin: HttpServer | None = None
    try:
        bound = await server.listen(host, port, reuse_port=reuse_port)
        running = Running(gateway, server, host, bound)
        if gateway.settings.admin_port is not None:
            admin = HttpServer(gateway.dispatcher(gateway.admin_routes()), limits)
            running.admin_port = await admin.listen(host, gateway.settings.admin_port, reuse_port=reuse_port)
            running.admin = admin
    except BaseException:
        if admin is not None:
            await admin.close(0)
        await server.close(0)
        await gateway.stop()
        raise
    return running


async def serve_until_signal(
    gateway: Gateway,
    on_ready: Callable[[Running], None] | None = None,
    *,
    port: int | None = None,
    reuse_port: bool = False,
) -> None:
    """Serve until SIGINT/SIGTERM, then drain and stop."""
    running = await start(gateway, port=port, reuse_port=reuse_port)
    try:
        if on_ready is not None:
            on_ready(running)
        await wait_for_signal()
    finally:
        log.info("shutting down", extra={"fields": {"port": running.port}})
        await running.stop()
