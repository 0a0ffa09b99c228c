"""Dollars for a series of questions about one shared prefix, with and without prompt caching.

With caching the first question writes the prefix to the cache (``cache_write`` x the input price,
1.25 for 5-minute entries and 2.0 for 1-hour entries by default) and every later question reads it
(``cache_read`` x the input price, 0.1 by default); without caching every question pays the full
input price for the prefix again. Prices are data: a YAML table the user edits (see
``examples/cost/prices.yaml``); this module only does the arithmetic.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from mmgate.errors import did_you_mean
from mmgate.tokens.providers import base_model_name

PER_MILLION = 1_000_000
TTLS = ("5m", "1h")
DEFAULT_MULTIPLIERS = {"cache_write_5m": 1.25, "cache_write_1h": 2.0, "cache_read": 0.1}


@dataclass(frozen=True, slots=True)
class ModelPrice:
    """USD per million tokens, and cache multipliers of the input price."""

    name: str
    input: float
    output: float
    cache_write_5m: float = 1.25
    cache_write_1h: float = 2.0
    cache_read: float = 0.1

    def cache_write(self, ttl: str) -> float:
        if ttl not in TTLS:
            raise ValueError(f"unknown cache TTL {ttl!r}; valid TTLs: {', '.join(TTLS)}")
        return self.cache_write_5m if ttl == "5m" else self.cache_write_1h


@dataclass(frozen=True, slots=True)
class Workload:
    prefix_tokens: int  # the shared, cacheable part (system prompt, document, images)
    question_tokens: int  # new input per question
    output_tokens: int  # generated per question
    questions: int

    def __post_init__(self) -> None:
        for name in ("prefix_tokens", "question_tokens", "output_tokens"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be ≥ 0, got {getattr(self, name)}")
        if self.questions < 1:
            raise ValueError(f"questions must be ≥ 1, got {self.questions}")


def cost_without_cache(m: ModelPrice, w: Workload, n: int | None = None) -> float:
    n = w.questions if n is None else n
    per_question = (w.prefix_tokens + w.question_tokens) * m.input + w.output_tokens * m.output
    return n * per_question / PER_MILLION


def cost_with_cache(m: ModelPrice, w: Workload, ttl: str = "5m", n: int | None = None) -> float:
    """First question writes the prefix, the other ``n - 1`` read it (all within the TTL)."""
    n = w.questions if n is None else n
    if n <= 0:
        return 0.0
    fresh = n * (w.question_tokens * m.input + w.output_tokens * m.output)
    prefix = w.prefix_tokens * m.input * (m.cache_write(ttl) + (n - 1) * m.cache_read)
    return (fresh + prefix) / PER_MILLION


def break_even(m: ModelPrice, ttl: str = "5m") -> int | None:
    """Fewest questions for which caching costs no more than not caching; None if it never pays.

    Caching costs ``(write - 1)`` extra prefix inputs once and saves ``(1 - read)`` on each later
    question, so it pays from ``n ≥ 1 + (write - 1) / (1 - read)``; independent of the token counts.
    """
    write, read = m.cache_write(ttl), m.cache_read
    if write <= 1:
        return 1
    if read >= 1:
        return None
    return max(1, math.ceil(1 + (write - 1) / (1 - read) - 1e-12))


@dataclass(frozen=True, slots=True)
class PriceTable:
    models: dict[str, ModelPrice]
    source: str = ""
    read: str | None = None  # the date the prices were read from the providers' pages

    def get(self, name: str) -> ModelPrice:
        """The row for ``name`` as written, or for its base name (``Claude-Sonnet-4-5-20250929``
        finds ``claude-sonnet-4-5``)."""
        model = self.models.get(name)
        if model is None:
            by_base = {base_model_name(n): m for n, m in self.models.items()}
            model = by_base.get(base_model_name(name))
        if model is None:
            valid = sorted(self.models)
            raise ValueError(
                f"model {name!r}{did_you_mean(name, valid)} is not in {self.source or 'the price table'}; "
                f"valid models: {', '.join(valid)}"
            )
        return model


_FIELDS = ("input", "output", "cache_write_5m", "cache_write_1h", "cache_read")


def parse_price_table(data: object, source: str = "") -> PriceTable:
    """Validate ``{defaults: {...}, models: {name: {input, output, ...}}}``; errors name the field."""
    where = source or "price table"
    if not isinstance(data, Mapping) or "models" not in data:
        raise ValueError(f"{where}: expected a mapping with a 'models' key")
    unknown_top = set(data) - {"models", "defaults", "currency", "unit", "read"}
    if unknown_top:
        raise ValueError(
            f"{where}: unknown top-level keys {sorted(unknown_top)}; "
            "valid: currency, defaults, models, read, unit"
        )
    defaults = dict(DEFAULT_MULTIPLIERS)
    defaults.update(_numbers(data.get("defaults") or {}, f"{where}: defaults", set(DEFAULT_MULTIPLIERS)))
    models_raw = data["models"]
    if not isinstance(models_raw, Mapping) or not models_raw:
        raise ValueError(f"{where}: 'models' must be a non-empty mapping of model name to prices")
    models: dict[str, ModelPrice] = {}
    for name, raw in models_raw.items():
        values = {**defaults, **_numbers(raw, f"{where}: models.{name}", set(_FIELDS))}
        for required in ("input", "output"):
            if required not in values:
                raise ValueError(f"{where}: models.{name} needs '{required}' (USD per million tokens)")
        models[str(name)] = ModelPrice(str(name), **values)
    read = data.get("read")
    return PriceTable(models, source, read=str(read) if read is not None else None)


def _numbers(raw: Any, where: str, allowed: set[str]) -> dict[str, float]:
    if not isinstance(raw, Mapping):
        raise ValueError(f"{where}: expected a mapping")
    out: dict[str, float] = {}
    for key, value in raw.items():
        if key not in allowed:
            raise ValueError(f"{where}: unknown key {key!r}; valid keys: {', '.join(sorted(allowed))}")
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or value < 0
            or not math.isfinite(value)
        ):
            raise ValueError(f"{where}.{key}: expected a non-negative number, got {value!r}")
        out[key] = float(value)
    return out


def load_price_table(path: str | Path) -> PriceTable:
    file = Path(path)
    try:
        text = file.read_text()
    except OSError as exc:
        raise ValueError(f"cannot read price table {file}: {exc.strerror}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ValueError(f"{file}: not valid YAML: {exc}") from None
    return parse_price_table(data, str(file))
