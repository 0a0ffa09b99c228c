"""Plugin types by their llm-d name, and strict decoding of their parameters."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any, TypeVar

from mmgate.config.strict import ConfigError, decode_strict
from mmgate.scheduling.framework import Plugin, PluginHandle

P = TypeVar("P", bound=type[Plugin])

_TYPES: dict[str, type[Plugin]] = {}
_ALIASES: dict[str, str] = {}
_loaded = False


def plugin(type_name: str, *, aliases: tuple[str, ...] = ()) -> Callable[[P], P]:
    """Register a plugin class under its llm-d type name (and deprecated aliases)."""

    def register(cls: P) -> P:
        if type_name in _TYPES and _TYPES[type_name] is not cls:
            raise RuntimeError(f"plugin type {type_name!r} registered twice")
        cls.type_name = type_name
        _TYPES[type_name] = cls
        for alias in aliases:
            _ALIASES[alias] = type_name
        return cls

    return register


def _load_builtins() -> None:
    global _loaded
    if not _loaded:
        importlib.import_module("mmgate.scheduling.plugins")
        _loaded = True


def plugin_types() -> list[str]:
    """Every registered type name, sorted."""
    _load_builtins()
    return sorted(_TYPES)


def plugin_class(type_name: str, *, path: str = "") -> type[Plugin]:
    _load_builtins()
    canonical = _ALIASES.get(type_name, type_name)
    cls = _TYPES.get(canonical)
    if cls is None:
        import difflib

        hint = difflib.get_close_matches(type_name, list(_TYPES), n=1, cutoff=0.6)
        did_you_mean = f" (did you mean {hint[0]!r}?)" if hint else ""
        raise ConfigError(
            f"unknown plugin type {type_name!r}{did_you_mean}; known types: {', '.join(sorted(_TYPES))}",
            path=path,
        )
    return cls


def create(type_name: str, name: str, parameters: Any, handle: PluginHandle, *, path: str = "") -> Plugin:
    """Instantiate a plugin, decoding ``parameters`` strictly into its ``Params`` struct."""
    cls = plugin_class(type_name, path=f"{path}.type" if path else "")
    params = decode_strict(parameters, cls.Params, path=f"{path}.parameters" if path else "parameters")
    try:
        return cls(name, params, handle)
    except ValueError as exc:
        if isinstance(exc, ConfigError):
            raise
        raise ConfigError(str(exc), path=f"{path}.parameters" if path else "parameters") from None
