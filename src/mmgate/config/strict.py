"""Strict decoding of plain data (from YAML) into msgspec structs, with errors a user can act on.

msgspec already rejects unknown fields, but its message names neither the keys that *are* valid
nor a likely intended spelling, and it stops at the first problem. llm-d decodes plugin
parameters with ``DisallowUnknownFields``; mmgate goes further: every error names the path
(``plugins[2].parameters.blockSize``), an unknown key lists the valid keys with a "did you mean"
when one is close, and a decode reports *every* problem it finds (:class:`ConfigErrors`), so a
user fixes a file in one round instead of one run per mistake.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Iterable, Sequence
from typing import Any, TypeVar

import msgspec

from mmgate.errors import did_you_mean

T = TypeVar("T")


class ConfigError(ValueError):
    """A configuration the gateway refuses to start with; ``path`` names the offending key.

    ``source`` and ``line`` say where the file gives that key, once known (see
    :meth:`located`); the message then reads ``FILE:LINE: path: reason``, as compilers print.
    """

    def __init__(self, message: str, *, path: str = "", source: str = "", line: int | None = None) -> None:
        self.path = path
        self.reason = message
        self.source = source
        self.line = line
        where = f"{path}: {message}" if path else message
        if source:
            where = f"{source}:{line}: {where}" if line is not None else f"{source}: {where}"
        super().__init__(where)

    @property
    def errors(self) -> tuple[ConfigError, ...]:
        """Every mistake this error stands for (just itself; :class:`ConfigErrors` holds several)."""
        return (self,)

    def located(self, source: str, line: int | None) -> ConfigError:
        """The same error, said to come from ``source`` at ``line``."""
        return ConfigError(self.reason, path=self.path, source=source, line=line)


class ConfigErrors(ConfigError):
    """Several mistakes found in one pass; :attr:`errors` lists them, ``str()`` one per line.

    It is a :class:`ConfigError` itself (its ``path`` and ``reason`` are the first mistake's), so
    code that handles one error handles many.
    """

    def __init__(self, errors: Sequence[ConfigError]) -> None:
        if not errors:
            raise ValueError("ConfigErrors needs at least one error")
        self._errors = tuple(e for err in errors for e in err.errors)
        first = self._errors[0]
        super().__init__(first.reason, path=first.path, source=first.source, line=first.line)
        self.args = ("\n".join(str(e) for e in self._errors),)

    def __str__(self) -> str:
        return str(self.args[0])

    @property
    def errors(self) -> tuple[ConfigError, ...]:
        return self._errors

    def located(self, source: str, line: int | None) -> ConfigError:
        return ConfigErrors([e.located(source, line) for e in self._errors])


def raise_if_any(errors: Iterable[ConfigError]) -> None:
    """Raise the one error, or :class:`ConfigErrors` holding all of them; nothing when empty."""
    found = [e for err in errors for e in err.errors]
    if len(found) == 1:
        raise found[0]
    if found:
        raise ConfigErrors(found)


def _join(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else key


def unknown_key_message(key: str, valid: list[str]) -> str:
    """``unknown key 'blokSize' (did you mean 'blockSize'?); valid keys: a, b, c``."""
    listing = ", ".join(valid) if valid else "none (this section takes no keys)"
    return f"unknown key {key!r}{did_you_mean(key, valid)}; valid keys: {listing}"


def _convert_error(exc: msgspec.ValidationError, path: str) -> ConfigError:
    """msgspec's message with its ``$[0].x`` suffix turned into our path."""
    text = str(exc)
    where = ""
    if " - at `$" in text:
        text, _, tail = text.partition(" - at `$")
        where = tail.rstrip("`")
    full = f"{path}{where}" if path or where.startswith("[") else where.lstrip(".")
    return ConfigError(text, path=full.lstrip("."))


def _struct_option(typ: Any) -> type[msgspec.Struct] | None:
    """The one struct a union (``Spec | None``, ``str | Spec``) allows, if exactly one."""
    options = [t for t in typing.get_args(typ) if isinstance(t, type) and issubclass(t, msgspec.Struct)]
    return options[0] if len(options) == 1 else None


def _collect(obj: Any, typ: Any, path: str, out: list[ConfigError]) -> None:
    """Append to ``out`` every problem of ``obj`` as a ``typ``, walking into structs, lists and
    dicts so that one bad value does not hide the next."""
    origin = typing.get_origin(typ)
    if origin in (typing.Union, types.UnionType) and isinstance(obj, dict):
        struct = _struct_option(typ)
        if struct is not None:
            typ, origin = struct, None
    if isinstance(typ, type) and issubclass(typ, msgspec.Struct) and isinstance(obj, dict):
        before = len(out)
        fields = {f.encode_name: f for f in msgspec.structs.fields(typ)}
        for key, value in obj.items():
            field = fields.get(key) if isinstance(key, str) else None
            if field is None:
                out.append(
                    ConfigError(unknown_key_message(str(key), list(fields)), path=_join(path, str(key)))
                )
            else:
                _collect(value, field.type, _join(path, key), out)
        for name, field in fields.items():
            if field.required and name not in obj:
                out.append(ConfigError(f"missing required key {name!r}", path=path))
        if len(out) > before:
            return  # the whole struct would only repeat what its fields said
    elif origin in (list, set, frozenset) and isinstance(obj, list):
        (item_type,) = typing.get_args(typ)
        for i, item in enumerate(obj):
            _collect(item, item_type, _join(path, i), out)
        return
    elif origin is dict and isinstance(obj, dict):
        _, value_type = typing.get_args(typ)
        for key, value in obj.items():
            _collect(value, value_type, _join(path, str(key)), out)
        return
    try:
        msgspec.convert(obj, typ)
    except msgspec.ValidationError as exc:
        out.append(_convert_error(exc, path))


def check_strict(obj: Any, typ: type[Any], *, path: str = "") -> list[ConfigError]:
    """Every problem of ``obj`` (plain dicts/lists/scalars) as a ``typ``, in document order."""
    out: list[ConfigError] = []
    _collect({} if obj is None else obj, typ, path, out)
    return out


def decode_strict(obj: Any, typ: type[T], *, path: str = "") -> T:
    """Convert ``obj`` (plain dicts/lists/scalars) to ``typ``, or raise :class:`ConfigError`
    (:class:`ConfigErrors` when there are several problems).

    ``None`` stands for "no parameters" and yields the type's defaults.
    """
    if obj is None:
        obj = {}
    raise_if_any(check_strict(obj, typ, path=path))
    try:
        return msgspec.convert(obj, typ)
    except msgspec.ValidationError as exc:  # pragma: no cover - check_strict converts the same
        raise _convert_error(exc, path) from None
