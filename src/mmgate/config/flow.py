"""The shape of flow control in a config file: llm-d's ``featureGates``, ``flowControl`` and
``saturationDetector`` sections, the flow-control plugin types, and mmgate's InferenceObjectives.

Field names keep llm-d's spelling (``apix/config``: ``FlowControlConfig``, ``PriorityBandConfig``)
so an llm-d file loads unchanged. Sizes are Kubernetes quantities (``"1Gi"``, ``"500M"``, ``"1k"``
or a plain number) and times Go durations (``"60s"``, ``"500ms"``, ``"2m"`` or a number of
seconds); :func:`quantity` and :func:`duration_s` read them. What the sections *mean* (which
policy a reference names, which band a priority falls into) is built by
:mod:`mmgate.control.flow.settings`.
"""

from __future__ import annotations

import re

import msgspec

FEATURE_GATE = "flowControl"
"""The ``featureGates`` entry that turns flow control on (llm-d's name)."""

# Flow-control plugin types: listed under ``plugins:`` like scheduling plugins (llm-d's layout),
# built by the flow controller, never by the scheduler.
UTILIZATION_DETECTOR = "utilization-detector"
GLOBAL_STRICT = "global-strict-fairness-policy"
ROUND_ROBIN = "round-robin-fairness-policy"
MEDIA_COST = "media-cost-fairness-policy"
FCFS = "fcfs-ordering-policy"
EDF = "edf-ordering-policy"
FAIRNESS_TYPES = (GLOBAL_STRICT, ROUND_ROBIN, MEDIA_COST)
ORDERING_TYPES = (FCFS, EDF)
FLOW_PLUGIN_TYPES = frozenset((UTILIZATION_DETECTOR, *FAIRNESS_TYPES, *ORDERING_TYPES))


class _Strict(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    pass


Quantity = int | float | str
Duration = int | float | str


class PluginRefSpec(_Strict):
    pluginRef: str


class PriorityBandSpec(_Strict):
    """One priority band (llm-d ``PriorityBandConfig``). Unset limits fall back to the
    ``defaultPriorityBand`` (or ``defaultNegativePriorityBand`` for a negative priority).
    ``maxRequestsPerFlow`` and ``maxBytesPerFlow`` are mmgate's: without them one flooding tenant
    fills the band's bound and everyone else's new requests are refused."""

    priority: int | None = None
    maxRequests: Quantity | None = None
    maxBytes: Quantity | None = None
    maxRequestsPerFlow: Quantity | None = None  # mmgate: bounds one fairness id's share of the band
    maxBytesPerFlow: Quantity | None = None
    defaultRequestTTL: Duration | None = None
    fairnessPolicyRef: str | None = None
    orderingPolicyRef: str | None = None


class FlowControlSpec(_Strict):
    """llm-d's ``FlowControlConfig``. ``maxRequests``/``maxBytes`` bound everything held at once
    (0 or unset: no bound); ``defaultRequestTTL`` is the longest a request is held. llm-d's
    ``noEndpointRequestTTL``, ``enableEviction`` and ``usageLimitPolicyPluginRef`` are accepted so
    its files load; mmgate has no use for them (see docs/flow-control.md)."""

    maxRequests: Quantity | None = None
    maxBytes: Quantity | None = None
    defaultRequestTTL: Duration | None = None
    noEndpointRequestTTL: Duration | None = None
    enableEviction: bool | None = None
    saturationDetector: PluginRefSpec | None = None
    usageLimitPolicyPluginRef: str | None = None
    defaultPriorityBand: PriorityBandSpec | None = None
    defaultNegativePriorityBand: PriorityBandSpec | None = None
    priorityBands: list[PriorityBandSpec] = msgspec.field(default_factory=list)


class SaturationDetectorSpec(_Strict):
    """The deprecated top-level ``saturationDetector`` section: the utilization detector's
    thresholds given directly (or a ``pluginRef``)."""

    pluginRef: str | None = None
    queueDepthThreshold: int | None = None
    kvCacheUtilThreshold: float | None = None
    metricsStalenessThreshold: Duration | None = None


class UtilizationDetectorParams(_Strict):
    """``utilization-detector``: an endpoint is saturated when its waiting queue is longer than
    ``queueDepthThreshold`` or its KV cache fuller than ``kvCacheUtilThreshold``, or its metrics
    are older than ``metricsStalenessThreshold`` (llm-d's defaults). mmgate adds two optional
    bounds on what the gateway itself has put there, known at once rather than at the next
    scrape: ``maxInflightRequests`` (sent, not finished) and ``maxInflightTokens`` (priced prompt
    tokens of the requests sent there that have no first token yet); 0: no bound."""

    queueDepthThreshold: int = 5
    kvCacheUtilThreshold: float = 0.8
    metricsStalenessThreshold: Duration = "2s"
    maxInflightRequests: int = 0
    maxInflightTokens: int = 0


class NoParams(_Strict):
    pass


class MediaCostParams(_Strict):
    """``media-cost-fairness-policy`` (mmgate): virtual cost counters (VTC) over what a request
    costs a pod, in estimated pod-seconds: prompt tokens (visual, audio and video tokens as priced)
    over ``prefillTokensPerSecond``, media tokens over ``encoderTokensPerSecond`` (the encoder's
    time), output tokens over ``outputTokensPerSecond``. Output is charged as observed when the
    transport sees the usage; until then ``max_tokens`` (or ``defaultOutputTokens``) is charged."""

    prefillTokensPerSecond: float = 15_000.0
    encoderTokensPerSecond: float = 20_000.0
    outputTokensPerSecond: float = 2_000.0
    defaultOutputTokens: int = 256


class EdfParams(_Strict):
    """``edf-ordering-policy`` (mmgate): earliest deadline first within a flow. A request's
    deadline is its arrival plus its TTFT target: the ``x-slo-ttft-ms`` header, else its
    InferenceObjective's ``ttftTargetMs``, else ``defaultTargetMs``."""

    defaultTargetMs: float = 10_000.0


PARAMS: dict[str, type[_Strict]] = {
    UTILIZATION_DETECTOR: UtilizationDetectorParams,
    GLOBAL_STRICT: NoParams,
    ROUND_ROBIN: NoParams,
    MEDIA_COST: MediaCostParams,
    FCFS: NoParams,
    EDF: EdfParams,
}


class ObjectiveSpec(_Strict):
    """An InferenceObjective (GIE's resource, given in the file): the name a client puts in
    ``x-gateway-inference-objective``, its priority (higher first; negative: sheddable) and,
    for EDF ordering, a TTFT target."""

    name: str
    priority: int = 0
    ttftTargetMs: float | None = None


_QUANTITY = re.compile(r"^\s*(\d+(?:\.\d+)?)(Ki|Mi|Gi|Ti|k|K|M|G|T)?\s*$")
_UNITS = {
    None: 1,
    "k": 10**3,
    "K": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|us|µs|ns|s|m|h)")
_SECONDS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def quantity(value: Quantity) -> int:
    """A Kubernetes quantity (``"1Gi"``, ``"500M"``, ``"1k"``, ``100``) as an integer. Raises
    ``ValueError`` for anything else or a negative number."""
    if isinstance(value, bool):
        raise ValueError(f"expected a quantity such as 100, '1k' or '1Gi', got {value!r}")
    if isinstance(value, int | float):
        if value < 0:
            raise ValueError(f"must be >= 0, got {value}")
        return int(value)
    match = _QUANTITY.match(value)
    if match is None:
        raise ValueError(f"expected a quantity such as 100, '1k' or '1Gi', got {value!r}")
    return int(float(match.group(1)) * _UNITS[match.group(2)])


def duration_s(value: Duration) -> float:
    """A Go duration (``"60s"``, ``"1m30s"``, ``"500ms"``) or a number of seconds, in seconds.
    Raises ``ValueError`` for anything else or a negative time."""
    if isinstance(value, bool):
        raise ValueError(f"expected a duration such as '60s' or '500ms', got {value!r}")
    if isinstance(value, int | float):
        if value < 0:
            raise ValueError(f"must be >= 0, got {value}")
        return float(value)
    text = value.strip()
    if text in ("0", ""):
        if text:
            return 0.0
        raise ValueError("expected a duration such as '60s' or '500ms', got ''")
    pos = 0
    total = 0.0
    for match in _DURATION.finditer(text):
        if match.start() != pos:
            break
        total += float(match.group(1)) * _SECONDS[match.group(2)]
        pos = match.end()
    if pos != len(text):
        raise ValueError(f"expected a duration such as '60s' or '500ms', got {value!r}")
    return total
