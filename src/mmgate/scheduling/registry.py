"""Plugin classes by their llm-d type name, and strict decoding of their parameters.

:func:`builtin_registry` is the one place the built-in plugins are registered: it reads the
tuple :data:`mmgate.scheduling.plugins.BUILTIN_PLUGINS`, and each class carries its own
``type_name`` (and deprecated ``aliases``). Nothing registers itself on import, so the plugins
depend on the framework only and the registry on the plugins, never the other way round.
A program (or a test) with plugins of its own builds a registry that adds them
(:meth:`PluginRegistry.with_plugins`) and passes it to :func:`mmgate.scheduling.build_scheduler`.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import cache
from typing import Any

from mmgate.config.strict import ConfigError, decode_strict
from mmgate.errors import did_you_mean
from mmgate.scheduling.contracts import Plugin, PluginHandle
from mmgate.scheduling.plugins import BUILTIN_PLUGINS


class PluginRegistry:
    """An immutable mapping from llm-d type names (and aliases) to plugin classes."""

    def __init__(self, classes: Iterable[type[Plugin[Any]]]) -> None:
        self._classes: tuple[type[Plugin[Any]], ...] = tuple(classes)
        self._types: dict[str, type[Plugin[Any]]] = {}
        self._aliases: dict[str, str] = {}
        for cls in self._classes:
            if not cls.type_name:
                raise TypeError(f"plugin class {cls.__name__} has no type_name")
            for name in (cls.type_name, *cls.aliases):
                if name in self._types or name in self._aliases:
                    raise TypeError(f"plugin type {name!r} registered twice")
            self._types[cls.type_name] = cls
            for alias in cls.aliases:
                self._aliases[alias] = cls.type_name

    def with_plugins(self, *classes: type[Plugin[Any]]) -> PluginRegistry:
        """A registry with these classes added (a name already taken is a ``TypeError``)."""
        return PluginRegistry((*self._classes, *classes))

    def types(self) -> list[str]:
        """Every registered type name (aliases left out), sorted."""
        return sorted(self._types)

    def lookup(self, type_name: str, *, path: str = "") -> type[Plugin[Any]]:
        """The class of ``type_name``; an unknown name is a :class:`ConfigError` with a hint."""
        cls = self._types.get(self._aliases.get(type_name, type_name))
        if cls is None:
            hint = did_you_mean(type_name, self._types)
            raise ConfigError(
                f"unknown plugin type {type_name!r}{hint}; known types: {', '.join(self.types())}",
                path=path,
            )
        return cls

    def create(
        self, type_name: str, name: str, parameters: Any, handle: PluginHandle, *, path: str = ""
    ) -> Plugin[Any]:
        """Instantiate a plugin, decoding ``parameters`` strictly into its ``Params`` struct. A
        ``ValueError`` from the plugin's constructor becomes a :class:`ConfigError` at
        ``path.parameters``."""
        cls = self.lookup(type_name, path=f"{path}.type" if path else "")
        where = f"{path}.parameters" if path else "parameters"
        params = decode_strict(parameters, cls.Params, path=where)
        try:
            return cls(name, params, handle)
        except ConfigError:
            raise
        except ValueError as exc:
            raise ConfigError(str(exc), path=where) from None


@cache
def builtin_registry() -> PluginRegistry:
    """The registry of every built-in plugin (made once)."""
    return PluginRegistry(BUILTIN_PLUGINS)


def plugin_types() -> list[str]:
    """Every built-in type name, sorted."""
    return builtin_registry().types()
