"""The shape of an mmgate config file: an llm-d ``EndpointPickerConfig`` plus an ``mmgate:`` section.

Field names keep llm-d's camelCase spelling so an llm-d config loads unchanged. Plugin
``parameters`` stay raw here; each plugin decodes its own strictly (see
:mod:`mmgate.scheduling.registry`), so the error names the plugin's valid keys.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from mmgate.config.flow import FlowControlSpec, ObjectiveSpec, SaturationDetectorSpec
from mmgate.config.lines import line_of
from mmgate.config.strict import ConfigError, ConfigErrors

API_VERSIONS = ("llm-d.ai/v1alpha1", "llm-d.ai/v1")
DEPRECATED_API_VERSIONS = ("inference.networking.x-k8s.io/v1alpha1",)
KIND = "EndpointPickerConfig"


class _Strict(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    pass


class PluginSpec(_Strict):
    """One plugin instance: ``name`` defaults to ``type`` (llm-d's rule)."""

    type: str
    name: str | None = None
    parameters: Any = None

    @property
    def instance_name(self) -> str:
        return self.name or self.type


class PluginRef(_Strict):
    """A plugin used by a profile; ``weight`` only matters for scorers (default 1.0)."""

    pluginRef: str
    weight: float | None = None


class SchedulingProfile(_Strict):
    name: str
    plugins: list[PluginRef] = msgspec.field(default_factory=list)


class ExtractorRef(_Strict):
    pluginRef: str


class DataSourceSpec(_Strict):
    pluginRef: str
    extractors: list[ExtractorRef] = msgspec.field(default_factory=list)


class DataLayerSpec(_Strict):
    """llm-d's data layer section. mmgate's scraper is built in; sources are accepted for
    compatibility and only ``metrics-data-source`` parameters are honoured by the gateway."""

    sources: list[DataSourceSpec] = msgspec.field(default_factory=list)
    injectDefaults: bool = True


class EndpointPickerConfig(_Strict):
    """llm-d's ``EndpointPickerConfig`` (apix/config/v1alpha1). ``featureGates``, ``flowControl``
    and the deprecated ``saturationDetector`` configure flow control (:mod:`mmgate.config.flow`;
    on only with the ``flowControl`` gate, as in llm-d). Sections mmgate does not act on
    (``requestHandler`` and the deprecated ``parser``) are accepted so llm-d files load, and
    ignored."""

    apiVersion: str = API_VERSIONS[0]
    kind: str = KIND
    plugins: list[PluginSpec] = msgspec.field(default_factory=list)
    schedulingProfiles: list[SchedulingProfile] = msgspec.field(default_factory=list)
    dataLayer: DataLayerSpec | None = None
    featureGates: list[str] = msgspec.field(default_factory=list)
    flowControl: FlowControlSpec | None = None
    requestHandler: Any = None
    saturationDetector: SaturationDetectorSpec | None = None
    parser: Any = None


class EndpointSpec(_Strict):
    """A model server. ``url`` is ``http://host:port`` (or ``host:port``); ``role`` is llm-d's
    ``llm-d.ai/role`` label value (``encode``, ``prefill``, ``decode``, ``both`` …); ``kvEvents``
    is where it publishes vLLM KV events (``tcp://HOST:PORT``, its ``--kv-events-config``
    endpoint as seen from the gateway) and ``kvEventsReplay`` its replay socket."""

    url: str
    role: str | None = None
    labels: dict[str, str] = msgspec.field(default_factory=dict)
    kvEvents: str | None = None
    kvEventsReplay: str | None = None


class KVEventsSpec(_Strict):
    """Subscribing to the pods' KV events (``mmgate.datalayer.kvevents``; docs/precise.md).

    An endpoint's address is its ``kvEvents``, else ``tcp://<endpoint host>:<port>`` when ``port``
    is set; data-parallel rank r publishes on port + r (as vLLM offsets them). ``bind`` is llm-d's
    centralised mode instead: the gateway binds that address and the pods connect to it, naming
    themselves in the topic ``kv@POD@MODEL``. ``queueSize`` bounds the batches waiting per socket
    (beyond it they are dropped, counted, and the endpoint resyncs); ``batchesPerTick`` bounds the
    work done between two turns of the event loop, so requests never wait behind a flood. The rest
    bound what an untrusted sender can make the gateway hold: ``maxBatchBytes`` per message (ZMQ
    drops a larger sender's link), ``maxPublishers`` sequence trackers, ``maxBlocksPerEndpoint``
    index entries per endpoint (least recently stored evicted), and ``maxSequenceGap``, beyond
    which a sequence jump counts as a reset rather than as lost batches."""

    port: int | None = None
    replayPort: int | None = None
    dataParallelSize: int = 1
    topicFilter: str = ""
    bind: str | None = None
    queueSize: int = 10_000
    replayTimeoutS: float = 2.0
    batchesPerTick: int = 64
    maxBatchBytes: int = 16 << 20
    maxPublishers: int = 4096
    maxSequenceGap: int = 1_000_000
    maxBlocksPerEndpoint: int = 1_000_000


class SharedIndexSpec(_Strict):
    """One affinity view for several gateway processes (``mmgate.datalayer.index.redis_mirror``):
    ``redis`` is ``redis://HOST:PORT[/DB]`` (or ``rediss://``, ``unix://``); ``keyPrefix`` namespaces
    the keys; ``outboxLimit`` bounds the changes queued while Redis is away."""

    redis: str
    keyPrefix: str = "mmgate"
    outboxLimit: int = 100_000


class KubernetesSpec(_Strict):
    """Endpoints from the Kubernetes API (``mmgate.datalayer.kubernetes``): the pods of an
    ``InferencePool`` (GIE's EPP flags ``--pool-name`` / ``--pool-namespace``), or pods by
    ``podSelector`` with ``targetPorts``. ``kubeconfig`` unset means the in-cluster service
    account; the role of each pod comes from its ``roleLabel`` label."""

    namespace: str = "default"
    inferencePool: str | None = None
    podSelector: str | None = None
    targetPorts: list[int] = msgspec.field(default_factory=list)
    kubeconfig: str | None = None
    roleLabel: str = "llm-d.ai/role"


class LimitsSpec(_Strict):
    """What a single request may carry before the gateway refuses it with a 4xx. These defaults are
    also the request parser's own (``mmgate.request.Limits`` takes them from here): they fit large
    multimodal models; tighten per fleet."""

    maxBodyBytes: int = 64 * 1024 * 1024  # 413 above this, before any decoding
    maxMediaItems: int = 128  # media parts per request, repeats included (each is encoded)
    maxDimension: int = 16384  # width or height, probed or declared in a header
    maxPixels: int = 16384 * 16384  # width * height
    maxDurationS: float = 4 * 3600.0  # video/audio, probed or declared
    validateBase64: bool = True  # check every inline payload's alphabet (one fast pass)
    urlSchemes: list[str] = msgspec.field(default_factory=lambda: ["http", "https"])  # file:, ftp: refused


class ValidationSpec(_Strict):
    """Requests the model server would refuse, refused by the gateway before the body is sent
    (a 400 naming the field; docs/gateway.md "Validation"). Each check can be switched off for a
    fleet that knows better (a server with a default model, a decoder for formats mmgate does not
    sniff, a family mmgate prices wrongly):

    - ``model``: a missing or empty ``model``;
    - ``mediaContent``: an inline payload whose bytes are not a media file of the part's kind
      (no known header, or an image header in a video part ...); a valid file under the wrong
      media type is priced by what it is, not refused;
    - ``modalities``: a part of a modality the served model's family has no rule for (audio to a
      vision-only family, video to an image-only one)."""

    model: bool = True
    mediaContent: bool = True
    modalities: bool = True


class PricingSpec(_Strict):
    """How requests are priced in tokens when ``token-producer`` does not say: ``family`` picks an
    exact model-family rule (e.g. ``qwen3-vl``); ``None`` uses llm-d's estimate."""

    family: str | None = None


class OutlierDetectionSpec(_Strict):
    """Per-endpoint circuit breaker (``mmgate.control.circuit_breaker``): eject an endpoint after
    ``consecutiveFailures`` failed attempts in a row (0 disables), for ``baseEjectionS`` doubling
    per repeated ejection up to ``maxEjectionS``; then one half-open probe request decides."""

    consecutiveFailures: int = 5
    baseEjectionS: float = 5.0
    maxEjectionS: float = 60.0


class AdmissionSpec(_Strict):
    """Overload shedding (``mmgate.control.admission``): at most ``maxInflight`` requests proxied
    at once (0: no limit; ``--max-inflight`` overrides), up to ``maxQueue`` more waiting for at
    most ``queueTimeoutS``, ``perClientInflight`` per API key or address (0: no limit). Beyond
    that: 429 with ``Retry-After``."""

    maxInflight: int = 0
    maxQueue: int = 0
    queueTimeoutS: float = 5.0
    perClientInflight: int = 0


class DisaggregationSpec(_Strict):
    """Who runs the encode and prefill legs of a disaggregated request (docs/disaggregation.md):
    ``sidecar`` (llm-d's contract: the routing headers go to the decode pod's ``mmgate sidecar``)
    or ``gateway`` (the gateway runs the legs itself). Per-leg timeouts, retries on another pod of
    the stage's pool, and what to do when a stage cannot be done (``local``: the decode pod does it
    itself; ``fail``: 503)."""

    orchestrator: Literal["sidecar", "gateway"] = "sidecar"
    fallback: Literal["local", "fail"] = "local"
    encodeTimeoutS: float = 30.0
    prefillTimeoutS: float = 120.0
    stageRetries: int = 1


class AuthSpec(_Strict):
    """API-key authentication (``mmgate.control.apikeys``): the keys file holds sha256 digests of
    the keys with each key's tenant and limits (``mmgate keys add`` writes entries); it is re-read
    when it changes, checked every ``reloadIntervalS``. A missing or unknown key: 401."""

    keysFile: str
    reloadIntervalS: float = 1.0


class UrlProbeSpec(_Strict):
    """Sizing URL media by their real headers (``mmgate.request.urlprobe``, ``urlsizing``): only
    hosts on ``allowHosts`` (``img.example.com``, ``*.cdn.example.com``), public addresses only
    (``allowPrivate`` lifts that, for tests), at most ``maxBytes`` read with one ``timeoutS`` for
    the whole exchange, no redirects; answers cached per URL for ``cacheTtlS``, at most
    ``cacheEntries``. Off unless the section is given."""

    allowHosts: list[str]
    allowPrivate: bool = False
    maxBytes: int = 64 * 1024
    timeoutS: float = 1.0
    cacheEntries: int = 4096
    cacheTtlS: float = 300.0


class TracingSpec(_Strict):
    """OpenTelemetry traces (``mmgate.gateway.tracing``; needs ``pip install 'mmgate[tracing]'``),
    exported over OTLP/HTTP to ``endpoint`` (a collector's base URL such as
    ``http://otel-collector:4318``, or its full ``/v1/traces`` URL). Unset keys fall back to the
    standard ``OTEL_*`` variables (``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``, ``OTEL_SERVICE_NAME``,
    ``OTEL_TRACES_SAMPLER``), then to ``http://localhost:4318``, ``mmgate`` and every trace.
    ``sampleRatio`` (0..1) samples new traces; a client's sampled flag is followed. Off unless the
    section is given (or ``--otlp-traces-endpoint``)."""

    endpoint: str | None = None
    serviceName: str | None = None
    sampleRatio: float | None = None


class UpstreamTLSSpec(_Strict):
    """TLS towards ``https://`` endpoints, for forwarding and metrics scraping alike. Certificates
    and hostnames are verified against the system trust store, plus ``caFile`` (a PEM bundle) for
    a private CA; ``insecureSkipVerify`` turns verification off (tests only: anyone on the path can
    read and alter the traffic)."""

    caFile: str | None = None
    insecureSkipVerify: bool = False


class MmgateSection(_Strict):
    """mmgate's own settings. Command-line flags override them (``mmgate serve`` applies them
    to this section before the gateway is built)."""

    host: str = "127.0.0.1"
    port: int = 8080
    endpoints: list[str | EndpointSpec] = msgspec.field(default_factory=list)
    endpointsFile: str | None = None
    kubernetes: KubernetesSpec | None = None
    limits: LimitsSpec = msgspec.field(default_factory=LimitsSpec)
    pricing: PricingSpec = msgspec.field(default_factory=PricingSpec)
    validation: ValidationSpec = msgspec.field(default_factory=ValidationSpec)
    scrapeIntervalMs: int = 50
    metricsStalenessMs: int = 2000
    maxRetries: int = 2
    requestTimeoutS: float = 600.0
    readTimeoutS: float = 300.0
    bodyTimeoutS: float = 30.0
    headerTimeoutS: float = 10.0
    sendTimeoutS: float = 60.0
    upstreamPoolLimit: int = 4096
    upstreamTLS: UpstreamTLSSpec = msgspec.field(default_factory=UpstreamTLSSpec)
    adminPort: int | None = None
    outlierDetection: OutlierDetectionSpec = msgspec.field(default_factory=OutlierDetectionSpec)
    admission: AdmissionSpec = msgspec.field(default_factory=AdmissionSpec)
    disaggregation: DisaggregationSpec = msgspec.field(default_factory=DisaggregationSpec)
    auth: AuthSpec | None = None
    urlProbe: UrlProbeSpec | None = None
    tracing: TracingSpec | None = None
    debugHeaders: bool = False
    accessLog: bool = True
    seed: int | None = None
    kvEvents: KVEventsSpec | None = None
    sharedIndex: SharedIndexSpec | None = None
    inferenceObjectives: list[ObjectiveSpec] = msgspec.field(default_factory=list)
    """Priorities by name for flow control (GIE's InferenceObjective resources, given here):
    ``x-gateway-inference-objective`` names one (docs/flow-control.md)."""
    mediaUuids: bool = True
    """Write each chat media part's content identity as its ``uuid`` when the client gave none, so
    vLLM keys the item (caches, KV events) as the gateway does (``mmgate.request.media_uuids``)."""


class GatewayConfig(msgspec.Struct):
    """A loaded file: the picker config and the mmgate section, each validated strictly.

    ``source`` names the file and ``lines`` maps each key's path to its line, so an error found
    later (when the scheduler is built) can still say where the file gives the key.
    """

    picker: EndpointPickerConfig
    mmgate: MmgateSection
    source: str = "<config>"
    lines: dict[str, int] = msgspec.field(default_factory=dict)

    def locate(self, error: ConfigError) -> ConfigError:
        """``error`` (one or several) with this file's name and each key's line."""
        located = [
            e if e.source else e.located(self.source, line_of(self.lines, e.path)) for e in error.errors
        ]
        return located[0] if len(located) == 1 else ConfigErrors(located)
