"""Strict decoding: every problem of a value in one pass, each at its own path."""

from __future__ import annotations

import msgspec
import pytest

from mmgate.config import ConfigError, ConfigErrors
from mmgate.config.strict import check_strict, decode_strict


class Spec(msgspec.Struct, forbid_unknown_fields=True):
    url: str
    weight: float = 1.0


class Doc(msgspec.Struct, forbid_unknown_fields=True):
    items: list[str | Spec] = msgspec.field(default_factory=list)
    named: dict[str, Spec] = msgspec.field(default_factory=dict)
    one: Spec | None = None


def test_problems_in_lists_dicts_and_optional_structs_are_all_found() -> None:
    data = {
        "items": ["a", {"url": "b", "wieght": 2}, {"weight": 1}, 5],
        "named": {"x": {"url": 1}},
        "one": {"url": "c", "weight": "heavy"},
        "extra": True,
    }
    found = [(e.path, e.reason.split(" (")[0].split(";")[0]) for e in check_strict(data, Doc)]
    assert found == [
        ("items[1].wieght", "unknown key 'wieght'"),
        ("items[2]", "missing required key 'url'"),
        ("items[3]", "Expected `str | object`, got `int`"),
        ("named.x.url", "Expected `str`, got `int`"),
        ("one.weight", "Expected `float`, got `str`"),
        ("extra", "unknown key 'extra'"),
    ]


def test_decode_raises_one_error_or_all_of_them() -> None:
    assert decode_strict({"items": ["a", {"url": "b"}]}, Doc).items == ["a", Spec("b")]
    assert decode_strict(None, Doc) == Doc()
    with pytest.raises(ConfigError) as one:
        decode_strict({"one": {"url": 3}}, Doc, path="p")
    assert not isinstance(one.value, ConfigErrors) and one.value.path == "p.one.url"
    with pytest.raises(ConfigErrors) as many:
        decode_strict({"one": {"url": 3}, "nope": 1}, Doc, path="p")
    assert [e.path for e in many.value.errors] == ["p.one.url", "p.nope"]
    assert str(many.value).splitlines() == [str(e) for e in many.value.errors]
    located = many.value.located("f.yaml", 7)
    assert str(located).splitlines()[0].startswith("f.yaml:7: p.one.url: Expected `str`")
