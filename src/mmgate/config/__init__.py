"""Configuration loading (llm-d EndpointPickerConfig-compatible, plus an ``mmgate:`` section).

>>> cfg = load_config("examples/aggregated.yaml")          # doctest: +SKIP
>>> scheduler = build_scheduler(cfg.picker)                # mmgate.scheduling

Every mistake raises :class:`ConfigError` naming the path of the offending key, and an unknown
key lists the valid ones. Plugin parameters are checked when the scheduler is built
(:func:`mmgate.scheduling.build_scheduler`); :func:`validate` does both in one call.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from mmgate.config.schema import (
    API_VERSIONS,
    DEPRECATED_API_VERSIONS,
    KIND,
    EndpointPickerConfig,
    EndpointSpec,
    GatewayConfig,
    MmgateSection,
    PluginRef,
    PluginSpec,
    SchedulingProfile,
)
from mmgate.config.strict import ConfigError, decode_strict

__all__ = [
    "ConfigError",
    "EndpointPickerConfig",
    "EndpointSpec",
    "GatewayConfig",
    "MmgateSection",
    "PluginRef",
    "PluginSpec",
    "SchedulingProfile",
    "decode_strict",
    "load_config",
    "load_config_text",
    "parse_config",
    "validate",
]


def load_config(path: str | Path) -> GatewayConfig:
    """Read and validate a YAML config file."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read config file: {exc.strerror or exc}", path=str(p)) from None
    return load_config_text(text, source=str(p))


def load_config_text(text: str, *, source: str = "<config>") -> GatewayConfig:
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source}: not valid YAML: {exc}") from None
    return parse_config(data, source=source)


def parse_config(data: Any, *, source: str = "<config>") -> GatewayConfig:
    """Validate already-parsed YAML/JSON data (a mapping) into a :class:`GatewayConfig`."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: the top level must be a mapping, got {type(data).__name__}")
    body = dict(data)
    section = body.pop("mmgate", None)
    picker = decode_strict(body, EndpointPickerConfig)
    mmgate = decode_strict(section, MmgateSection, path="mmgate")
    _check_picker(picker)
    _check_mmgate(mmgate)
    return GatewayConfig(picker=picker, mmgate=mmgate, source=source)


def validate(config: GatewayConfig) -> None:
    """Also build the scheduler once, so plugin parameters and profile references are checked."""
    from mmgate.scheduling import build_scheduler

    build_scheduler(config.picker, mmgate=config.mmgate)


def _check_picker(cfg: EndpointPickerConfig) -> None:
    if cfg.apiVersion not in API_VERSIONS + DEPRECATED_API_VERSIONS:
        valid = ", ".join(API_VERSIONS)
        raise ConfigError(
            f"unsupported apiVersion {cfg.apiVersion!r}; use one of: {valid}", path="apiVersion"
        )
    if cfg.kind != KIND:
        raise ConfigError(f"kind must be {KIND!r}, got {cfg.kind!r}", path="kind")
    seen: set[str] = set()
    for i, spec in enumerate(cfg.plugins):
        if spec.instance_name in seen:
            raise ConfigError(f"duplicate plugin name {spec.instance_name!r}", path=f"plugins[{i}].name")
        seen.add(spec.instance_name)
    names: set[str] = set()
    for i, profile in enumerate(cfg.schedulingProfiles):
        if profile.name in names:
            raise ConfigError(
                f"duplicate profile name {profile.name!r}", path=f"schedulingProfiles[{i}].name"
            )
        names.add(profile.name)
        for j, ref in enumerate(profile.plugins):
            where = f"schedulingProfiles[{i}].plugins[{j}]"
            if ref.pluginRef not in seen:
                known = ", ".join(sorted(seen)) or "none"
                raise ConfigError(
                    f"pluginRef {ref.pluginRef!r} is not defined under plugins (defined: {known})",
                    path=f"{where}.pluginRef",
                )
            if ref.weight is not None and ref.weight < 0:
                raise ConfigError(f"weight must be >= 0, got {ref.weight}", path=f"{where}.weight")


def _check_mmgate(m: MmgateSection) -> None:
    if not 0 <= m.port <= 65535:
        raise ConfigError(f"port must be in 0..65535, got {m.port}", path="mmgate.port")
    if m.scrapeIntervalMs < 50:
        raise ConfigError(
            f"scrapeIntervalMs must be >= 50 (llm-d's minimum refresh interval), got {m.scrapeIntervalMs}",
            path="mmgate.scrapeIntervalMs",
        )
    if m.metricsStalenessMs <= 0:
        raise ConfigError("metricsStalenessMs must be > 0", path="mmgate.metricsStalenessMs")
    if m.maxRetries < 0:
        raise ConfigError("maxRetries must be >= 0", path="mmgate.maxRetries")
    lim = m.limits
    for key in ("maxBodyBytes", "maxDimension", "maxPixels", "maxDurationS"):
        if getattr(lim, key) <= 0:
            raise ConfigError(f"must be > 0, got {getattr(lim, key)}", path=f"mmgate.limits.{key}")
    if lim.maxMediaItems < 0:
        raise ConfigError(f"must be >= 0, got {lim.maxMediaItems}", path="mmgate.limits.maxMediaItems")
