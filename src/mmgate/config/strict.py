"""Strict decoding of plain data (from YAML) into msgspec structs, with errors a user can act on.

msgspec already rejects unknown fields, but its message names neither the keys that *are* valid
nor a likely intended spelling. llm-d decodes plugin parameters with ``DisallowUnknownFields``;
mmgate goes one step further: every error names the path (``plugins[2].parameters.blockSize``),
and an unknown key lists the valid keys with a "did you mean" when one is close.
"""

from __future__ import annotations

import difflib
from typing import Any, TypeVar

import msgspec
import msgspec.inspect as mi

T = TypeVar("T")


class ConfigError(ValueError):
    """A configuration the gateway refuses to start with; ``path`` names the offending key."""

    def __init__(self, message: str, *, path: str = "") -> None:
        super().__init__(f"{path}: {message}" if path else message)
        self.path = path
        self.reason = message


def _join(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else key


def unknown_key_message(key: str, valid: list[str]) -> str:
    """``unknown key 'blokSize' (did you mean 'blockSize'?); valid keys: a, b, c``."""
    hint = difflib.get_close_matches(key, valid, n=1, cutoff=0.6)
    did_you_mean = f" (did you mean {hint[0]!r}?)" if hint else ""
    listing = ", ".join(valid) if valid else "none (this section takes no keys)"
    return f"unknown key {key!r}{did_you_mean}; valid keys: {listing}"


def _check_keys(obj: Any, info: mi.Type, path: str) -> None:
    """Walk ``obj`` alongside the type tree and raise on the first key no struct declares."""
    if isinstance(info, mi.StructType):
        if not isinstance(obj, dict):
            return  # msgspec reports the type mismatch with its own message
        fields = {f.encode_name: f for f in info.fields}
        for key, value in obj.items():
            field = fields.get(key) if isinstance(key, str) else None
            if field is None:
                raise ConfigError(unknown_key_message(str(key), list(fields)), path=_join(path, str(key)))
            _check_keys(value, field.type, _join(path, key))
    elif isinstance(info, mi.UnionType):
        for option in info.types:
            if (isinstance(option, mi.StructType) and isinstance(obj, dict)) or (
                isinstance(option, mi.ListType | mi.DictType) and isinstance(obj, list | dict)
            ):
                _check_keys(obj, option, path)
    elif isinstance(info, mi.ListType | mi.SetType | mi.FrozenSetType | mi.VarTupleType):
        if isinstance(obj, list):
            for i, item in enumerate(obj):
                _check_keys(item, info.item_type, _join(path, i))
    elif isinstance(info, mi.DictType) and isinstance(obj, dict):
        for key, value in obj.items():
            _check_keys(value, info.value_type, _join(path, str(key)))


def decode_strict(obj: Any, typ: type[T], *, path: str = "") -> T:
    """Convert ``obj`` (plain dicts/lists/scalars) to ``typ``, or raise :class:`ConfigError`.

    ``None`` stands for "no parameters" and yields the type's defaults.
    """
    if obj is None:
        obj = {}
    _check_keys(obj, mi.type_info(typ), path)
    try:
        return msgspec.convert(obj, typ)
    except msgspec.ValidationError as exc:
        text = str(exc)
        where = ""
        if " - at `$" in text:
            text, _, tail = text.partition(" - at `$")
            where = tail.rstrip("`")
        full = f"{path}{where}" if path or where.startswith("[") else where.lstrip(".")
        raise ConfigError(text, path=full.lstrip(".")) from None
