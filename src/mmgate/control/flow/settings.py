"""What a config's flow-control sections mean: the detector's thresholds, the bounds, and each
priority band's limits, ordering and fairness policy.

Flow control is on only when ``featureGates`` lists ``flowControl`` (llm-d's rule). A band's
settings come from the ``priorityBands`` entry with its priority, else ``defaultPriorityBand``
(``defaultNegativePriorityBand`` for a negative priority); its fairness and ordering references
name a flow-control plugin under ``plugins:`` or a policy type directly (llm-d's built-in
defaults: ``global-strict-fairness-policy`` and ``fcfs-ordering-policy``). The detector is the
``utilization-detector`` that ``flowControl.saturationDetector.pluginRef`` names, else the
deprecated top-level ``saturationDetector`` thresholds, else llm-d's defaults.

A sheddable band (negative priority) holds nothing unless its ``maxRequests`` says how many: a
sheddable request whose endpoints are saturated is refused at once (429), which is what makes it
sheddable. Mistakes are :class:`ConfigError` naming the key, so ``mmgate check`` reports them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from mmgate.config.flow import (
    EDF,
    FAIRNESS_TYPES,
    FCFS,
    FEATURE_GATE,
    FLOW_PLUGIN_TYPES,
    GLOBAL_STRICT,
    MEDIA_COST,
    ORDERING_TYPES,
    PARAMS,
    ROUND_ROBIN,
    UTILIZATION_DETECTOR,
    MediaCostParams,
    PriorityBandSpec,
    UtilizationDetectorParams,
    duration_s,
    quantity,
)
from mmgate.config.schema import EndpointPickerConfig, MmgateSection
from mmgate.config.strict import ConfigError, ConfigErrors, decode_strict
from mmgate.control.flow.classify import Objective
from mmgate.control.flow.dispatcher import BandPlan, DispatcherLimits
from mmgate.control.flow.policies import CostModel, FairnessPolicy, GlobalStrict, RoundRobin, VirtualCost
from mmgate.control.flow.queues import BandLimits
from mmgate.control.flow.saturation import DetectorSettings

DEFAULT_TTL_S = 60.0  # llm-d's defaultRequestTTL


@dataclass(slots=True)
class FlowSettings:
    detector: DetectorSettings = field(default_factory=DetectorSettings)
    limits: DispatcherLimits = field(default_factory=DispatcherLimits)
    objectives: tuple[Objective, ...] = ()
    retry_after_s: int = 1
    _bands: dict[int, PriorityBandSpec] = field(default_factory=dict)
    _default: PriorityBandSpec = field(default_factory=PriorityBandSpec)
    _negative: PriorityBandSpec | None = None
    _default_ttl_s: float = DEFAULT_TTL_S
    _plugins: dict[str, tuple[str, Any]] = field(default_factory=dict)  # name -> (type, params)
    _plans: dict[int, BandPlan] = field(default_factory=dict)

    def plan(self, priority: int) -> BandPlan:
        """The band for ``priority`` (made once per priority)."""
        made = self._plans.get(priority)
        if made is None:
            made = self._plans[priority] = self._make_plan(priority)
        return made

    def _make_plan(self, priority: int) -> BandPlan:
        spec = self._bands.get(priority)
        default = self._default if priority >= 0 or self._negative is None else self._negative

        def pick(name: str) -> Any:
            value = getattr(spec, name) if spec is not None else None
            return value if value is not None else getattr(default, name)

        max_requests = pick("maxRequests")
        ttl = pick("defaultRequestTTL")
        limits = BandLimits(
            max_requests=quantity(max_requests) if max_requests is not None else 0,
            max_bytes=quantity(b) if (b := pick("maxBytes")) is not None else 0,
            max_requests_per_flow=quantity(r) if (r := pick("maxRequestsPerFlow")) is not None else 0,
            max_bytes_per_flow=quantity(b) if (b := pick("maxBytesPerFlow")) is not None else 0,
            ttl_s=duration_s(ttl) if ttl is not None else self._default_ttl_s,
            hold=priority >= 0 or (max_requests is not None and quantity(max_requests) > 0),
        )
        fairness_type, fairness_params = self._resolve(pick("fairnessPolicyRef") or GLOBAL_STRICT)
        ordering_type, ordering_params = self._resolve(pick("orderingPolicyRef") or FCFS)
        cost: CostModel | None = None
        make: Callable[[], FairnessPolicy]
        if fairness_type == MEDIA_COST:
            p: MediaCostParams = fairness_params
            cost = CostModel(
                prefill_tokens_per_s=p.prefillTokensPerSecond,
                encoder_tokens_per_s=p.encoderTokensPerSecond,
                output_tokens_per_s=p.outputTokensPerSecond,
                default_output_tokens=p.defaultOutputTokens,
            )
            make = VirtualCost
        elif fairness_type == ROUND_ROBIN:
            make = RoundRobin
        else:
            make = GlobalStrict
        edf_target = ordering_params.defaultTargetMs / 1000.0 if ordering_type == EDF else 0.0
        return BandPlan(limits, ordering_type == EDF, edf_target, cost, make)

    def _resolve(self, ref: str) -> tuple[str, Any]:
        found = self._plugins.get(ref)
        if found is not None:
            return found
        return ref, decode_strict(None, PARAMS[ref])


def enabled(picker: EndpointPickerConfig) -> bool:
    return FEATURE_GATE in picker.featureGates


def flow_settings_of(picker: EndpointPickerConfig, section: MmgateSection) -> FlowSettings | None:
    """The flow-control settings of a config (``None``: the feature gate is off). Raises
    :class:`ConfigError` (several: :class:`ConfigErrors`) naming each wrong key."""
    if not enabled(picker):
        return None
    errors: list[ConfigError] = []
    plugins: dict[str, tuple[str, Any]] = {}
    for i, spec in enumerate(picker.plugins):
        if spec.type not in FLOW_PLUGIN_TYPES:
            continue
        try:
            params = decode_strict(spec.parameters, PARAMS[spec.type], path=f"plugins[{i}].parameters")
        except ConfigError as exc:
            errors.extend(exc.errors)
            continue
        plugins[spec.instance_name] = (spec.type, params)
    fc = picker.flowControl
    settings = FlowSettings(_plugins=plugins)
    settings.objectives = tuple(
        Objective(o.name, o.priority, o.ttftTargetMs / 1000.0 if o.ttftTargetMs else None)
        for o in section.inferenceObjectives
    )
    for i, objective in enumerate(section.inferenceObjectives):
        if objective.ttftTargetMs is not None and objective.ttftTargetMs <= 0:
            errors.append(ConfigError("must be > 0", path=f"mmgate.inferenceObjectives[{i}].ttftTargetMs"))
    names = [o.name for o in section.inferenceObjectives]
    for i, name in enumerate(names):
        if name in names[:i]:
            errors.append(
                ConfigError(
                    f"objective {name!r} is defined twice", path=f"mmgate.inferenceObjectives[{i}].name"
                )
            )
    settings.detector = _detector(picker, plugins, errors)
    if fc is not None:
        settings.limits = DispatcherLimits(
            max_requests=_checked(quantity, fc.maxRequests, "flowControl.maxRequests", errors, 0),
            max_bytes=_checked(quantity, fc.maxBytes, "flowControl.maxBytes", errors, 0),
        )
        settings._default_ttl_s = _checked(
            duration_s, fc.defaultRequestTTL, "flowControl.defaultRequestTTL", errors, DEFAULT_TTL_S
        )
        if fc.defaultPriorityBand is not None:
            settings._default = fc.defaultPriorityBand
            _check_band(fc.defaultPriorityBand, "flowControl.defaultPriorityBand", plugins, errors)
        if fc.defaultNegativePriorityBand is not None:
            settings._negative = fc.defaultNegativePriorityBand
            _check_band(
                fc.defaultNegativePriorityBand, "flowControl.defaultNegativePriorityBand", plugins, errors
            )
        for i, band in enumerate(fc.priorityBands):
            where = f"flowControl.priorityBands[{i}]"
            if band.priority is None:
                errors.append(ConfigError("a priority band needs its priority", path=f"{where}.priority"))
                continue
            if band.priority in settings._bands:
                errors.append(
                    ConfigError(f"priority {band.priority} has two bands", path=f"{where}.priority")
                )
            settings._bands[band.priority] = band
            _check_band(band, where, plugins, errors)
        if fc.saturationDetector is not None:
            ref = fc.saturationDetector.pluginRef
            kind = plugins.get(ref, (ref, None))[0]
            if kind != UTILIZATION_DETECTOR:
                errors.append(
                    ConfigError(
                        f"{ref!r} is not a saturation detector; mmgate has {UTILIZATION_DETECTOR!r}",
                        path="flowControl.saturationDetector.pluginRef",
                    )
                )
    if errors:
        raise errors[0] if len(errors) == 1 else ConfigErrors(errors)
    return settings


def _detector(
    picker: EndpointPickerConfig, plugins: dict[str, tuple[str, Any]], errors: list[ConfigError]
) -> DetectorSettings:
    params: UtilizationDetectorParams | None = None
    fc = picker.flowControl
    if fc is not None and fc.saturationDetector is not None:
        found = plugins.get(fc.saturationDetector.pluginRef)
        if found is not None and found[0] == UTILIZATION_DETECTOR:
            params = found[1]
    if params is None:
        listed = [p for t, p in plugins.values() if t == UTILIZATION_DETECTOR]
        params = listed[0] if listed else UtilizationDetectorParams()
    old = picker.saturationDetector
    queue, kv, stale = (
        params.queueDepthThreshold,
        params.kvCacheUtilThreshold,
        params.metricsStalenessThreshold,
    )
    if old is not None:  # the deprecated section's thresholds, where given
        queue = old.queueDepthThreshold if old.queueDepthThreshold is not None else queue
        kv = old.kvCacheUtilThreshold if old.kvCacheUtilThreshold is not None else kv
        stale = old.metricsStalenessThreshold if old.metricsStalenessThreshold is not None else stale
    if queue < 0:
        errors.append(ConfigError(f"must be >= 0, got {queue}", path="queueDepthThreshold"))
    if not 0.0 <= kv <= 1.0:
        errors.append(ConfigError(f"must be between 0 and 1, got {kv}", path="kvCacheUtilThreshold"))
    if params.maxInflightRequests < 0 or params.maxInflightTokens < 0:
        errors.append(ConfigError("in-flight bounds must be >= 0", path="maxInflightRequests"))
    return DetectorSettings(
        queue_depth=queue,
        kv_utilization=kv,
        staleness_s=_checked(duration_s, stale, "metricsStalenessThreshold", errors, 2.0),
        max_inflight_requests=params.maxInflightRequests,
        max_inflight_tokens=params.maxInflightTokens,
    )


def _check_band(
    band: PriorityBandSpec, where: str, plugins: dict[str, tuple[str, Any]], errors: list[ConfigError]
) -> None:
    for key in ("maxRequests", "maxBytes", "maxRequestsPerFlow", "maxBytesPerFlow"):
        _checked(quantity, getattr(band, key), f"{where}.{key}", errors, 0)
    _checked(duration_s, band.defaultRequestTTL, f"{where}.defaultRequestTTL", errors, 0.0)
    for key, kinds in (("fairnessPolicyRef", FAIRNESS_TYPES), ("orderingPolicyRef", ORDERING_TYPES)):
        ref = getattr(band, key)
        if ref is None:
            continue
        kind = plugins.get(ref, (ref, None))[0]
        if kind not in kinds:
            errors.append(
                ConfigError(
                    f"{ref!r} is not one of {', '.join(kinds)} (or a plugin of those types)",
                    path=f"{where}.{key}",
                )
            )


def _checked(
    read: Callable[[Any], Any], value: Any, path: str, errors: list[ConfigError], default: Any
) -> Any:
    if value is None:
        return default
    try:
        return read(value)
    except ValueError as exc:
        errors.append(ConfigError(str(exc), path=path))
        return default
