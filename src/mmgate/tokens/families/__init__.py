"""Registry of served model families by name (``mmgate tokens --list`` prints it)."""

from __future__ import annotations

from typing import Any

from mmgate.tokens.families.qwen import QWEN2_5_VL, QWEN2_VL, QWEN3_VL
from mmgate.tokens.rules import Family, unknown

FAMILIES: dict[str, Family[Any]] = {
    f.name: f
    for f in (
        QWEN2_VL,
        QWEN2_5_VL,
        QWEN3_VL,
    )
}

ALIASES = {"qwen2_vl": "qwen2-vl", "qwen2_5_vl": "qwen2.5-vl", "qwen3_vl": "qwen3-vl"}


def get_family(name: str) -> Family[Any]:
    """The family called ``name`` (case-insensitive); an error listing the valid names otherwise."""
    key = name.strip().lower()
    key = ALIASES.get(key, key)
    family = FAMILIES.get(key)
    if family is None:
        raise unknown("family", name, FAMILIES)
    return family
