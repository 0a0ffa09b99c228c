"""Which key a request presents: exact matching, the two headers, and what is never trimmed."""

from __future__ import annotations

from pathlib import Path

import pytest

from mmgate.control.apikeys import KeyStore, hash_key, presented_key
from mmgate.errors import RequestError

KEY = "sk-mmgate-0123456789"


def refused(headers: dict[str, str]) -> str:
    with pytest.raises(RequestError) as raised:
        presented_key(headers)
    assert raised.value.status == 401 and raised.value.code == "invalid_api_key"
    return raised.value.message


@pytest.mark.parametrize(
    "headers",
    [
        {"Authorization": f"Bearer {KEY}"},
        {"Authorization": f"bearer {KEY}"},  # the scheme is case-insensitive (RFC 9110 §11.1)
        {"x-api-key": KEY},
        {"Authorization": f"Bearer {KEY}", "x-api-key": KEY},  # the same key twice: fine
        # Spaces and tabs around a field value are not part of it (RFC 9110 §5.5, a MUST).
        {"Authorization": f" Bearer {KEY} \t"},
        {"x-api-key": f"\t{KEY} "},
        {"Authorization": f"Bearer  {KEY}"},  # RFC 6750 §2.1: "Bearer" 1*SP token
    ],
)
def test_the_key_is_read_from_either_header(headers: dict[str, str]) -> None:
    assert presented_key(headers) == KEY


@pytest.mark.parametrize(
    "suffix",
    ["\x0b", "\x0c", "\r", "\x85", "\xa0", "\u2003", "\x00", " x"],  # none of them is OWS
)
def test_whitespace_other_than_the_field_edges_is_never_trimmed(suffix: str) -> None:
    """Python's ``str.strip`` trimmed all of these, so ``KEY<suffix>`` was accepted as KEY."""
    message = refused({"Authorization": f"Bearer {KEY}{suffix}"})
    assert "whitespace or a control character" in message and KEY not in message
    refused({"x-api-key": f"{KEY}{suffix}"})


def test_two_different_keys_are_a_conflict_named_in_the_answer() -> None:
    message = refused({"Authorization": f"Bearer {KEY}", "x-api-key": "sk-other"})
    assert "'Authorization' and 'x-api-key'" in message and KEY not in message


def test_missing_empty_and_foreign_schemes() -> None:
    assert presented_key({}) is None
    assert presented_key({"x-api-key": " "}) is None
    assert "Bearer scheme" in refused({"Authorization": f"Basic {KEY}"})
    assert "empty API key" in refused({"Authorization": "Bearer"})
    # another scheme beside an x-api-key: the Authorization was for someone else
    assert presented_key({"Authorization": "Basic dXNlcjpwdw==", "x-api-key": KEY}) == KEY


def test_the_store_matches_the_exact_key(tmp_path: Path) -> None:
    path = tmp_path / "keys.yaml"
    path.write_text(f"keys: [{{sha256: {hash_key(KEY)}, tenant: team-a}}]")
    store = KeyStore(path)
    assert store.verify({"x-api-key": KEY}).tenant == "team-a"
    with pytest.raises(RequestError):
        store.verify({"x-api-key": KEY + "0"})
    with pytest.raises(RequestError):
        store.verify({"x-api-key": KEY + "\xa0"})
