"""Turning an ``EndpointPickerConfig`` into a :class:`Scheduler`, with llm-d's default injection.

Defaults (llm-d ``docs/architecture.md``, "Default plugins"): a ``default`` profile when none is
configured (holding every configured filter, scorer and picker), ``single-profile-handler`` when
there is exactly one profile, ``max-score-picker`` in a profile without a picker, weight 1.0 for a
scorer without one, and a default producer for every datum a plugin consumes but no configured
producer produces. Producers then run in dependency order.

mmgate adds one default of the same kind: a profile handler that runs a profile for another stage
(``encode``, ``prefill``) gets that stage's routing-header handler (``encoder-header-handler``,
``prefill-header-handler``) when the config lists none for that header, so the pod chosen for the
stage is named to the primary pod's sidecar whether or not the config says so.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from mmgate.config.flow import FLOW_PLUGIN_TYPES
from mmgate.config.schema import EndpointPickerConfig, MmgateSection, PluginRef, SchedulingProfile
from mmgate.config.strict import ConfigError, raise_if_any
from mmgate.datalayer.index.memory import AffinityIndex
from mmgate.datalayer.index.store import AffinityStore, IndexProvider
from mmgate.datalayer.kvevents.settings import kv_events_settings_of
from mmgate.scheduling.contracts import (
    Filter,
    Picker,
    Plugin,
    PluginHandle,
    PluginTimer,
    Producer,
    ProfileHandler,
    Scorer,
)
from mmgate.scheduling.keys import DEFAULT_PRODUCERS
from mmgate.scheduling.lifecycle import PreRequest
from mmgate.scheduling.profile import Profile, WeightedScorer
from mmgate.scheduling.registry import PluginRegistry, builtin_registry
from mmgate.scheduling.scheduler import Scheduler

DEFAULT_PROFILE = "default"
DEFAULT_HEADER_HANDLERS: dict[str, tuple[str, str]] = {
    "encode": ("encoder-header-handler", "encodeProfile"),
    "prefill": ("prefill-header-handler", "prefillProfile"),
}
"""Per stage: the header handler created when none is configured, and its profile parameter."""


def build_scheduler(
    config: EndpointPickerConfig | None = None,
    *,
    mmgate: MmgateSection | None = None,
    rng: random.Random | None = None,
    seed: int | None = None,
    registry: PluginRegistry | None = None,
    indexes: IndexProvider | None = None,
    kv_blocks: AffinityStore[Any] | None = None,
    plugin_timer: PluginTimer | None = None,
) -> Scheduler:
    """Build a scheduler. ``rng`` (or ``seed``) makes every random choice reproducible;
    ``registry`` (default: the built-in plugins) says which plugin types exist; ``indexes``
    supplies the affinity indexes (default: in memory, one set per scheduler); ``kv_blocks`` is
    the block index the KV-event subscriber feeds (default: a new one when the ``mmgate:`` section
    subscribes to KV events, so ``precise-prefix-cache-producer`` can be built); ``plugin_timer``
    receives each plugin's processing time (the gateway's per-plugin histogram).

    This is where a config's meaning is checked: plugin types and parameters, unique names,
    references from profiles, handlers and producers. Every mistake is collected and raised
    together (:class:`ConfigErrors` when there are several); a plugin that could not be made is
    left out of the later checks, so one mistake is reported once, not again by each reference.
    """
    registry = registry if registry is not None else builtin_registry()
    cfg = config if config is not None else EndpointPickerConfig()
    section = mmgate if mmgate is not None else MmgateSection()
    if rng is None:
        rng = random.Random(seed if seed is not None else section.seed)
    if kv_blocks is None and kv_events_settings_of(section) is not None:
        kv_blocks = AffinityIndex()
    handle = PluginHandle(
        rng,
        pricing_family=section.pricing.family,
        refuse_unserved_modalities=section.validation.modalities,
        indexes=indexes,
        kv_blocks=kv_blocks,
    )
    errors: list[ConfigError] = []

    plugins: dict[str, Plugin[Any]] = {}
    broken: set[str] = set()  # configured, but not made: references to them are not new mistakes
    for i, spec in enumerate(cfg.plugins):
        if spec.type in FLOW_PLUGIN_TYPES:  # the flow controller builds these (mmgate.control.flow)
            continue
        name = spec.instance_name
        if name in plugins or name in broken:
            errors.append(ConfigError(f"duplicate plugin name {name!r}", path=f"plugins[{i}].name"))
            continue
        try:
            plugins[name] = registry.create(spec.type, name, spec.parameters, handle, path=f"plugins[{i}]")
        except ConfigError as exc:
            errors.extend(exc.errors)
            broken.add(name)
            continue
        handle.plugins[name] = plugins[name]

    def injected(type_name: str) -> Plugin[Any]:
        existing = plugins.get(type_name)
        if existing is not None and existing.type_name == type_name:
            return existing
        made = registry.create(type_name, type_name, None, handle)
        plugins[type_name] = made
        handle.plugins[type_name] = made
        return made

    for i, spec in enumerate(cfg.plugins):
        made = plugins.get(spec.instance_name)
        if made is None:
            continue
        try:
            made.resolve(plugins)
        except ValueError as exc:
            errors.append(ConfigError(str(exc), path=f"plugins[{i}].parameters"))

    profile_specs = cfg.schedulingProfiles or [_default_profile(plugins)]
    profiles: dict[str, Profile] = {}
    seen: set[str] = set()
    for i, profile_spec in enumerate(profile_specs):
        if profile_spec.name in seen:
            where = f"schedulingProfiles[{i}].name"
            errors.append(ConfigError(f"duplicate profile name {profile_spec.name!r}", path=where))
            continue
        seen.add(profile_spec.name)
        profile = _build_profile(i, profile_spec, plugins, broken, injected, errors)
        if profile is not None:
            profiles[profile_spec.name] = profile

    handler = _handler(plugins, len(profile_specs), injected, errors if not broken else [])
    # With a mistake so far, the handler may be the broken plugin and producer resolution would
    # only guess around the broken pieces: stop here.
    raise_if_any(errors)
    assert handler is not None
    _add_header_handlers(registry, handler, profiles, plugins, handle)
    paths = {spec.instance_name: f"plugins[{i}]" for i, spec in enumerate(cfg.plugins)}
    producers = _resolve_producers(plugins, injected, paths)
    return Scheduler(
        producers=producers,
        profiles=profiles,
        handler=handler,
        plugins=plugins,
        rng=rng,
        metrics_staleness_s=section.metricsStalenessMs / 1000.0,
        plugin_timer=plugin_timer,
    )


def _handler(
    plugins: dict[str, Plugin[Any]],
    n_profiles: int,
    injected: Callable[[str], Plugin[Any]],
    errors: list[ConfigError],
) -> ProfileHandler[Any] | None:
    handlers = [p for p in plugins.values() if isinstance(p, ProfileHandler)]
    if len(handlers) > 1:
        names = ", ".join(p.name for p in handlers)
        errors.append(ConfigError(f"more than one profile handler configured: {names}", path="plugins"))
        return None
    if handlers:
        return handlers[0]
    if n_profiles == 1:
        made = injected("single-profile-handler")
        assert isinstance(made, ProfileHandler)
        return made
    errors.append(
        ConfigError(
            f"{n_profiles} scheduling profiles need a profile handler plugin "
            "(single-profile-handler only handles one profile)",
            path="schedulingProfiles",
        )
    )
    return None


def _add_header_handlers(
    registry: PluginRegistry,
    handler: ProfileHandler[Any],
    profiles: dict[str, Profile],
    plugins: dict[str, Plugin[Any]],
    handle: PluginHandle,
) -> None:
    """The default routing-header handler for each stage profile whose header nobody sets."""
    for stage, profile in handler.stage_profiles().items():
        default = DEFAULT_HEADER_HANDLERS.get(stage)
        if default is None or profile not in profiles:
            continue
        type_name, parameter = default
        header = getattr(registry.lookup(type_name), "routing_header", "")
        if any(isinstance(p, PreRequest) and p.routing_header == header for p in plugins.values()):
            continue
        name = type_name if type_name not in plugins else f"{type_name}@{profile}"
        plugins[name] = handle.plugins[name] = registry.create(type_name, name, {parameter: profile}, handle)


def _default_profile(plugins: dict[str, Plugin[Any]]) -> SchedulingProfile:
    refs = [
        PluginRef(pluginRef=name) for name, p in plugins.items() if isinstance(p, Filter | Scorer | Picker)
    ]
    return SchedulingProfile(name=DEFAULT_PROFILE, plugins=refs)


def _build_profile(
    index: int,
    spec: SchedulingProfile,
    plugins: dict[str, Plugin[Any]],
    broken: set[str],
    injected: Callable[[str], Plugin[Any]],
    errors: list[ConfigError],
) -> Profile | None:
    """The profile, or ``None`` when a reference in it is wrong (each wrong one is in ``errors``)."""
    before = len(errors)
    filters: list[Filter[Any]] = []
    scorers: list[WeightedScorer] = []
    picker: Picker[Any] | None = None
    for j, ref in enumerate(spec.plugins):
        where = f"schedulingProfiles[{index}].plugins[{j}].pluginRef"
        p = plugins.get(ref.pluginRef)
        if p is None:
            if ref.pluginRef not in broken:
                known = ", ".join(sorted(plugins.keys() | broken)) or "none"
                errors.append(
                    ConfigError(
                        f"pluginRef {ref.pluginRef!r} is not defined under plugins (defined: {known})",
                        path=where,
                    )
                )
            continue
        used = False
        if isinstance(p, Filter):
            filters.append(p)
            used = True
        if isinstance(p, Scorer):
            scorers.append(WeightedScorer(p, 1.0 if ref.weight is None else ref.weight))
            used = True
        if isinstance(p, Picker):
            if picker is not None:
                message = f"profile {spec.name!r} has two pickers: {picker.name!r} and {p.name!r}"
                errors.append(ConfigError(message, path=where))
            picker = p
            used = True
        if not used:
            message = (
                f"{p.name!r} ({p.type_name}) is not a filter, scorer or picker; list it under plugins only"
            )
            errors.append(ConfigError(message, path=where))
    if len(errors) > before:
        return None
    if picker is None:
        made = injected("max-score-picker")
        assert isinstance(made, Picker)
        picker = made
    return Profile(spec.name, filters, scorers, picker)


def _base(key: str) -> str:
    return key.split("@", 1)[0]


def _resolve_producers(
    plugins: dict[str, Plugin[Any]], injected: Callable[[str], Plugin[Any]], where: dict[str, str]
) -> list[Producer[Any]]:
    """Create missing default producers, then order all producers so inputs come first.
    ``where`` gives each configured plugin's path, so a mistake names the entry to fix."""
    while True:
        produced = {k.name for p in plugins.values() if isinstance(p, Producer) for k in p.produces()}
        missing = [
            (k.name, p) for p in list(plugins.values()) for k in p.consumes() if k.name not in produced
        ]
        if not missing:
            break
        key, consumer = missing[0]
        if "@" in key:
            raise ConfigError(
                f"{consumer.name!r} reads data from producer {key.split('@', 1)[1]!r}, "
                f"which is not configured (or does not produce {_base(key)})",
                path=f"{where[consumer.name]}.parameters" if consumer.name in where else "",
            )
        default_type = DEFAULT_PRODUCERS.get(key)
        if default_type is None:
            raise ConfigError(
                f"{consumer.name!r} needs {key}, which no plugin produces", path=where.get(consumer.name, "")
            )
        made = injected(default_type)
        if not isinstance(made, Producer) or key not in {k.name for k in made.produces()}:
            raise ConfigError(f"default producer {default_type!r} cannot provide {key}")

    producers = [p for p in plugins.values() if isinstance(p, Producer)]
    by_key: dict[str, list[Producer[Any]]] = {}
    for p in producers:
        for k in p.produces():
            by_key.setdefault(k.name, []).append(p)
    ordered: list[Producer[Any]] = []
    state: dict[str, int] = {}  # 1 = visiting, 2 = done

    def visit(p: Producer[Any], chain: list[str]) -> None:
        mark = state.get(p.name, 0)
        if mark == 2:
            return
        if mark == 1:
            cycle = " -> ".join([*chain, p.name])
            raise ConfigError(
                f"producers depend on each other in a cycle: {cycle}", path=where.get(p.name, "")
            )
        state[p.name] = 1
        for k in (*p.consumes(), *p.consumes_optional()):
            for dep in by_key.get(k.name, []):
                if dep is not p:
                    visit(dep, [*chain, p.name])
        state[p.name] = 2
        ordered.append(p)

    for p in producers:
        visit(p, [])
    return ordered
