"""A config file's meaning, checked where the app is assembled.

:mod:`mmgate.config` checks a file's shape. What the values mean is checked by the code that uses
each one: the scheduler build (plugin types, parameters, references, default injection), the
endpoint parser, the pricing family table and the TLS set-up. This module runs them all against
one file and gives every mistake its path and line, so ``mmgate check`` and ``mmgate serve``
report the same mistakes, all of them, in file order.
"""

from __future__ import annotations

from typing import Any

import msgspec

from mmgate.config import ConfigError, GatewayConfig, in_file_order, read_config
from mmgate.config.flow import FEATURE_GATE, FLOW_PLUGIN_TYPES
from mmgate.config.schema import EndpointSpec, MmgateSection
from mmgate.config.strict import raise_if_any
from mmgate.control.flow import flow_settings_of
from mmgate.datalayer.endpoints import Endpoint, parse_endpoint
from mmgate.scheduling import Plugin, Scheduler, build_scheduler
from mmgate.tls import client_context
from mmgate.tokens import get_family
from mmgate.tokens.cost import load_price_table


def endpoint_of(item: str | EndpointSpec) -> Endpoint:
    """One entry of ``mmgate.endpoints`` (a URL, or a URL with its role, labels and KV-event
    addresses) as the data layer's :class:`Endpoint`; ``ValueError`` names what is wrong."""
    spec = item if isinstance(item, EndpointSpec) else EndpointSpec(url=item)
    return parse_endpoint(
        spec.url, role=spec.role, labels=spec.labels, kv_events=spec.kvEvents, kv_replay=spec.kvEventsReplay
    )


def reference_errors(m: MmgateSection) -> list[ConfigError]:
    """Values that name something outside the file: endpoint addresses, the pricing family and the
    CA file. Each is checked by the code that uses it; this only gives the mistake its path, so
    ``mmgate check`` finds what ``mmgate serve`` would refuse."""
    errors: list[ConfigError] = []
    for i, item in enumerate(m.endpoints):
        try:
            endpoint_of(item)
        except ValueError as exc:
            where = f"mmgate.endpoints[{i}]" + (".url" if isinstance(item, EndpointSpec) else "")
            errors.append(ConfigError(str(exc), path=where))
    if m.pricing.family is not None:
        try:
            get_family(m.pricing.family)
        except ValueError as exc:
            errors.append(ConfigError(str(exc), path="mmgate.pricing.family"))
    if m.upstreamTLS.caFile is not None:
        try:
            client_context(m.upstreamTLS.caFile)
        except ConfigError as exc:
            errors.append(exc)
    return errors


def check_config(config: GatewayConfig) -> tuple[Scheduler | None, list[ConfigError]]:
    """Every meaning mistake of ``config`` (located, in file order); the scheduler when none."""
    errors = [config.locate(e) for e in reference_errors(config.mmgate)]
    scheduler: Scheduler | None = None
    try:
        scheduler = build_scheduler(config.picker, mmgate=config.mmgate)
    except ConfigError as exc:
        errors += config.locate(exc).errors
    try:  # the flow-control sections' meaning (policy references, sizes, durations)
        flow_settings_of(config.picker, config.mmgate)
    except ConfigError as exc:
        errors += config.locate(exc).errors
    return (None, in_file_order(errors)) if errors else (scheduler, [])


def check_file(path: str) -> tuple[GatewayConfig | None, Scheduler | None, list[ConfigError]]:
    """Every mistake of one file, located; the config and scheduler when there is none.

    The meaning is checked even when the ``mmgate:`` section has shape mistakes (with that
    section's defaults), so both kinds show up in one run; it is not when the picker part did not
    decode.
    """
    config, errors = read_config(path)
    if config is None:
        return None, None, _other_kind(path) or errors
    scheduler, meaning = check_config(config)
    if errors or meaning:
        return config, None, in_file_order(errors + meaning)
    return config, scheduler, []


def _other_kind(path: str) -> list[ConfigError]:
    """For a file that is not a gateway config at all: one line naming the command it is for,
    when it is one of mmgate's other files (a ``mmgate cost`` price table sits in ``examples/``
    beside the configs), instead of an "unknown key" per key."""
    try:
        load_price_table(path)
    except ValueError:
        return []
    return [
        ConfigError(
            "looks like a `mmgate cost` price table (use it with `mmgate cost --price-table FILE`); "
            "mmgate check reads gateway configs (llm-d EndpointPickerConfig)",
            source=path,
        )
    ]


def load_checked(path: str) -> GatewayConfig:
    """The config in ``path``, or :class:`ConfigError` / ``ConfigErrors`` with every mistake."""
    config, _, errors = check_file(path)
    raise_if_any(errors)
    assert config is not None
    return config


def describe(scheduler: Scheduler, configured: set[str]) -> list[tuple[str, str, str]]:
    """Rows of (stage, plugin, non-default parameters); injected defaults are marked."""

    def row(where: str, p: Plugin[Any], extra: str = "") -> tuple[str, str, str]:
        name = p.name if p.name == p.type_name else f"{p.name} ({p.type_name})"
        if p.name not in configured:
            name += " (injected default)"
        return (where, name, ", ".join(x for x in (extra, _params(p)) if x))

    rows = [row(f"producer {i + 1}", p) for i, p in enumerate(scheduler.producers)]
    rows.append(row("profile handler", scheduler.handler))
    for profile in scheduler.profiles.values():
        rows += [row(f"{profile.name}: filter", f) for f in profile.filters]
        rows += [row(f"{profile.name}: scorer", ws.scorer, f"weight={ws.weight:g}") for ws in profile.scorers]
        rows.append(row(f"{profile.name}: picker", profile.picker))
    return rows


def describe_flow(config: GatewayConfig) -> list[tuple[str, str, str]]:
    """Rows for flow control when its feature gate is on: its plugins, each band given, the
    objectives of the file (and whether Kubernetes adds its own), and where a priority comes from."""
    if FEATURE_GATE not in config.picker.featureGates:
        return []
    rows = [
        ("flow control", p.instance_name, _given(p.parameters))
        for p in config.picker.plugins
        if p.type in FLOW_PLUGIN_TYPES
    ]
    fc = config.picker.flowControl
    if fc is not None:
        for band in fc.priorityBands:
            given = {
                k: v for k, v in msgspec.structs.asdict(band).items() if v is not None and k != "priority"
            }
            rows.append(("flow control", f"priority {band.priority}", _given(given)))
    rows = rows or [("flow control", "on", "llm-d's defaults")]
    section = config.mmgate
    for o in section.inferenceObjectives:
        target = f", ttftTargetMs={o.ttftTargetMs:g}" if o.ttftTargetMs is not None else ""
        rows.append(("flow control", f"objective {o.name}", f"priority={o.priority}{target}"))
    k8s = section.kubernetes
    if k8s is not None and k8s.inferencePool:
        found = f"InferenceObjectives of pool {k8s.inferencePool} in {k8s.namespace}, over the file's"
        rows.append(("flow control", "objectives from Kubernetes", found))
    order = "x-gateway-inference-objective, else the API key's objective/priority, else 0"
    rows.append(("flow control", "priority from", order))
    return rows


def _given(params: Any) -> str:
    if not params:
        return ""
    return ", ".join(f"{k}={_short(v)}" for k, v in dict(params).items())


def _params(p: Plugin[Any]) -> str:
    raw = msgspec.to_builtins(p.params)
    defaults = msgspec.to_builtins(type(p.params)())
    changed = {k: v for k, v in raw.items() if defaults.get(k) != v} if isinstance(raw, dict) else {}
    return ", ".join(f"{k}={_short(v)}" for k, v in changed.items())


def _short(value: object) -> str:
    """Numbers without noise; nested sections by their keys (the YAML has the details)."""
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, dict):
        return "{" + ", ".join(value) + "}"
    return str(value)
