"""The header rules, as pure functions: what goes upstream, what comes back, which request ids are kept."""

from __future__ import annotations

from mmgate.http.headers import relay_headers, request_id_from, upstream_headers


def test_client_request_ids_are_kept_only_when_safe() -> None:
    assert request_id_from({"x-request-id": "abc-123.X:y_z"}) == "abc-123.X:y_z"
    for unsafe in ("", "has space", "a" * 129, "new\nline", "ünï"):
        generated = request_id_from({"x-request-id": unsafe})
        assert generated != unsafe and len(generated) == 32


def test_upstream_and_response_header_rules() -> None:
    sent = upstream_headers(
        [
            ("Authorization", "Bearer k"),
            ("Connection", "keep-alive"),
            ("Host", "gw"),
            ("X-Prefiller-Host-Port", "evil:1"),
            ("x-mmgate-anything", "1"),
            ("X-Request-Id", "client"),
            ("Content-Type", "application/json"),
        ],
        "rid",
    )
    assert sent == [
        ("Authorization", "Bearer k"),
        ("Content-Type", "application/json"),
        ("x-request-id", "rid"),
    ]
    shown = relay_headers(
        [("Content-Type", "text/event-stream"), ("Transfer-Encoding", "chunked"), ("x-mmgate-endpoint", "x")]
    )
    assert shown == ([("Content-Type", "text/event-stream")], None)
    shown = relay_headers(
        [("Content-Length", "12"), ("Set-Cookie", "a"), ("Set-Cookie", "b"), ("Server", "x")]
    )
    assert shown == ([("Set-Cookie", "a"), ("Set-Cookie", "b")], 12)  # repeated headers kept


def test_header_rules_hold_for_names_seen_before_and_beyond_the_remembered_ones() -> None:
    client = [("X-Custom", "1"), ("connection", "x-drop-me"), ("X-Drop-Me", "2"), ("HOST", "gw")]
    for _ in range(2):  # the second time every name's fate is remembered
        assert upstream_headers(client, "rid") == [("X-Custom", "1"), ("x-request-id", "rid")]
    many = [(f"X-Name-{i}", str(i)) for i in range(1500)] + [(f"X-MMGATE-{i}", "r") for i in range(600)]
    for _ in range(2):
        assert upstream_headers(many, "rid") == [*many[:1500], ("x-request-id", "rid")]
