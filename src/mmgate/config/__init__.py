"""Configuration loading (llm-d EndpointPickerConfig-compatible, plus an ``mmgate:`` section).

>>> cfg = load_config("examples/aggregated.yaml")          # doctest: +SKIP
>>> scheduler = build_scheduler(cfg.picker)                # mmgate.scheduling

This package owns the *shape* of a file: YAML, known keys, value types and ranges, apiVersion and
kind; it imports nothing of mmgate above it, so every layer may read a config. What the file
*means* (plugin types and parameters, references between them, default injection, endpoint
addresses, the pricing family, the CA file) is checked where the app is assembled
(:mod:`mmgate.gateway.config_check`), with the code that uses each value.
Every mistake is a :class:`ConfigError` naming the path of the offending key (and the file and
line, see :meth:`GatewayConfig.locate`); a file with several mistakes raises
:class:`ConfigErrors` listing them all. ``mmgate check FILE...`` runs both checks.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import msgspec
import yaml

from mmgate.config.lines import key_lines
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
from mmgate.config.strict import ConfigError, ConfigErrors, check_strict, decode_strict, raise_if_any
from mmgate.errors import did_you_mean

__all__ = [
    "ConfigError",
    "ConfigErrors",
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
    "read_config_text",
]


def load_config(path: str | Path) -> GatewayConfig:
    """Read and validate a YAML config file (every shape error at once, each with its line)."""
    config, errors = read_config(path)
    raise_if_any(errors)
    assert config is not None
    return config


def load_config_text(text: str, *, source: str = "<config>") -> GatewayConfig:
    config, errors = read_config_text(text, source=source)
    raise_if_any(errors)
    assert config is not None
    return config


def read_config(path: str | Path) -> tuple[GatewayConfig | None, list[ConfigError]]:
    """Like :func:`read_config_text`, for a file."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        return None, [ConfigError(f"cannot read config file: {exc.strerror or exc}", source=str(p))]
    except UnicodeDecodeError as exc:
        return None, [ConfigError(f"not UTF-8 text ({exc.reason} at byte {exc.start})", source=str(p))]
    return read_config_text(text, source=str(p))


def read_config_text(
    text: str, *, source: str = "<config>"
) -> tuple[GatewayConfig | None, list[ConfigError]]:
    """Every shape error of ``text`` (located), and the config as far as it decoded, for a checker
    that goes on to the meaning: ``None`` when the picker part did not decode; a section that did
    not decode is left at its defaults. A config returned with errors is never one to serve."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        parts = [getattr(exc, "context", None), getattr(exc, "problem", None)]
        reason = ", ".join(str(p) for p in parts if p) or " ".join(str(exc).split())
        return None, [ConfigError(f"not valid YAML: {reason}", source=source, line=line)]
    config, errors = _parse(data, source)
    if config is not None:
        config.lines = key_lines(text)
    draft = config or GatewayConfig(EndpointPickerConfig(), MmgateSection(), source, key_lines(text))
    return config, in_file_order([draft.locate(e) for e in errors])


def in_file_order(errors: list[ConfigError]) -> list[ConfigError]:
    """Sorted by line (stable; errors without a line last), as a reader goes through the file."""
    return sorted(errors, key=lambda e: (e.line is None, e.line or 0))


def parse_config(data: Any, *, source: str = "<config>") -> GatewayConfig:
    """Validate already-parsed YAML/JSON data (a mapping) into a :class:`GatewayConfig`."""
    config, errors = _parse(data, source)
    raise_if_any(errors)
    assert config is not None
    return config


def _parse(data: Any, source: str) -> tuple[GatewayConfig | None, list[ConfigError]]:
    if data is None:
        data = {}
    if not isinstance(data, dict):
        return None, [
            ConfigError(f"the top level must be a mapping, got {type(data).__name__}", source=source)
        ]
    if data and not any(key in _TOP_KEYS or did_you_mean(str(key), _TOP_KEYS) for key in data):
        # Nothing of a gateway config at all, not even a misspelt key (another tool's file, a
        # wrong path): one line saying so reads better than an "unknown key" for every key.
        return None, [ConfigError(_not_a_config(data), source=source)]
    body = dict(data)
    section = body.pop("mmgate", None)
    picker_errors = check_strict(body, EndpointPickerConfig)
    mmgate_errors = check_strict(section, MmgateSection, path="mmgate")
    # Unknown top-level keys (a misspelt section) do not stop the rest from being checked.
    unknown = {e.path for e in picker_errors if e.path in body and e.path not in _PICKER_KEYS}
    rest = {k: v for k, v in body.items() if k not in unknown}
    picker = None if len(unknown) < len(picker_errors) else decode_strict(rest, EndpointPickerConfig)
    mmgate = MmgateSection() if mmgate_errors else decode_strict(section, MmgateSection, path="mmgate")
    errors = picker_errors + (_check_picker(picker) if picker is not None else [])
    errors += mmgate_errors or _check_mmgate(mmgate)
    if picker is None:
        return None, errors
    return GatewayConfig(picker=picker, mmgate=mmgate, source=source), errors


_PICKER_KEYS = frozenset(f.encode_name for f in msgspec.structs.fields(EndpointPickerConfig))
_TOP_KEYS = _PICKER_KEYS | {"mmgate"}


def _not_a_config(data: dict[Any, Any]) -> str:
    keys = ", ".join(str(k) for k in list(data)[:6]) + (", ..." if len(data) > 6 else "")
    return (
        f"not an EndpointPickerConfig: none of its top-level keys ({keys}) is one of "
        f"{', '.join(sorted(_PICKER_KEYS))} or mmgate"
    )


def _check_picker(cfg: EndpointPickerConfig) -> list[ConfigError]:
    errors: list[ConfigError] = []
    if cfg.apiVersion not in API_VERSIONS + DEPRECATED_API_VERSIONS:
        valid = ", ".join(API_VERSIONS)
        errors.append(
            ConfigError(f"unsupported apiVersion {cfg.apiVersion!r}; use one of: {valid}", path="apiVersion")
        )
    if cfg.kind != KIND:
        errors.append(ConfigError(f"kind must be {KIND!r}, got {cfg.kind!r}", path="kind"))
    for i, profile in enumerate(cfg.schedulingProfiles):
        for j, ref in enumerate(profile.plugins):
            if ref.weight is not None and ref.weight < 0:
                where = f"schedulingProfiles[{i}].plugins[{j}].weight"
                errors.append(ConfigError(f"weight must be >= 0, got {ref.weight}", path=where))
    return errors


def _check_mmgate(m: MmgateSection) -> list[ConfigError]:
    errors: list[ConfigError] = []
    if not 0 <= m.port <= 65535:
        errors.append(ConfigError(f"port must be in 0..65535, got {m.port}", path="mmgate.port"))
    if m.scrapeIntervalMs < 50:
        errors.append(
            ConfigError(
                f"scrapeIntervalMs must be >= 50 (llm-d's minimum refresh interval), "
                f"got {m.scrapeIntervalMs}",
                path="mmgate.scrapeIntervalMs",
            )
        )
    if m.metricsStalenessMs <= 0:
        errors.append(ConfigError("metricsStalenessMs must be > 0", path="mmgate.metricsStalenessMs"))
    if m.maxRetries < 0:
        errors.append(ConfigError("maxRetries must be >= 0", path="mmgate.maxRetries"))
    lim = m.limits
    for key in ("maxBodyBytes", "maxDimension", "maxPixels", "maxDurationS"):
        if getattr(lim, key) <= 0:
            errors.append(ConfigError(f"must be > 0, got {getattr(lim, key)}", path=f"mmgate.limits.{key}"))
    if lim.maxMediaItems < 0:
        errors.append(
            ConfigError(f"must be >= 0, got {lim.maxMediaItems}", path="mmgate.limits.maxMediaItems")
        )
    errors += _check_kv_events(m)
    if m.sharedIndex is not None:
        url = m.sharedIndex.redis
        if not url.startswith(("redis://", "rediss://", "unix://")):
            errors.append(
                ConfigError(
                    f"expected redis://HOST:PORT (or rediss://, unix://), got {url!r}",
                    path="mmgate.sharedIndex.redis",
                )
            )
        if m.sharedIndex.outboxLimit < 1:
            errors.append(ConfigError("must be >= 1", path="mmgate.sharedIndex.outboxLimit"))
    errors += _check_tracing(m)
    d = m.disaggregation
    for key in ("encodeTimeoutS", "prefillTimeoutS"):
        if getattr(d, key) <= 0:
            path = f"mmgate.disaggregation.{key}"
            errors.append(ConfigError(f"must be > 0, got {getattr(d, key)}", path=path))
    if d.stageRetries < 0:
        path = "mmgate.disaggregation.stageRetries"
        errors.append(ConfigError(f"must be >= 0, got {d.stageRetries}", path=path))
    return errors


def _check_tracing(m: MmgateSection) -> list[ConfigError]:
    """``mmgate.tracing``: an OTLP/HTTP collector is an http(s) URL with a host; a sample ratio is
    a fraction."""
    errors: list[ConfigError] = []
    spec = m.tracing
    if spec is None:
        return errors
    if spec.endpoint is not None:
        parts = urlsplit(spec.endpoint)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            message = f"expected the http(s) URL of an OTLP/HTTP collector, got {spec.endpoint!r}"
            errors.append(ConfigError(message, path="mmgate.tracing.endpoint"))
    if spec.sampleRatio is not None and not 0.0 <= spec.sampleRatio <= 1.0:
        message = f"must be between 0 and 1, got {spec.sampleRatio}"
        errors.append(ConfigError(message, path="mmgate.tracing.sampleRatio"))
    return errors


def _check_kv_events(m: MmgateSection) -> list[ConfigError]:
    errors: list[ConfigError] = []
    kv = m.kvEvents
    if kv is None:
        return errors
    for key in ("port", "replayPort"):
        port = getattr(kv, key)
        if port is not None and not 1 <= port <= 65535:
            errors.append(ConfigError(f"must be in 1..65535, got {port}", path=f"mmgate.kvEvents.{key}"))
    bounds = ("maxBatchBytes", "maxPublishers", "maxSequenceGap", "maxBlocksPerEndpoint")
    for key in ("dataParallelSize", "queueSize", "batchesPerTick", *bounds):
        if getattr(kv, key) < 1:
            errors.append(ConfigError(f"must be >= 1, got {getattr(kv, key)}", path=f"mmgate.kvEvents.{key}"))
    if kv.replayTimeoutS <= 0:
        errors.append(ConfigError("must be > 0", path="mmgate.kvEvents.replayTimeoutS"))
    if kv.bind is not None and "://" not in kv.bind:
        errors.append(
            ConfigError(
                f"expected a ZMQ address such as tcp://*:5557, got {kv.bind!r}", path="mmgate.kvEvents.bind"
            )
        )
    return errors
