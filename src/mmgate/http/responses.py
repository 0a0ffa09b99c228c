"""Whole responses the gateway writes itself, and the OpenAI error shape
(``{"error": {message, type, param, code}}``) every client-visible error takes."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from mmgate.errors import RequestError

JSON = "application/json"

_STATUS_TYPE = {
    404: "not_found_error",
    405: "invalid_request_error",
    413: "invalid_request_error",
    414: "invalid_request_error",
    429: "rate_limit_error",
    502: "upstream_error",
    503: "service_unavailable",
    504: "timeout_error",
}


@dataclass(slots=True)
class Response:
    """A response whose body is known up front (sent with a Content-Length in one write)."""

    status: int
    body: bytes
    content_type: str = JSON
    headers: list[tuple[str, str]] = field(default_factory=list)

    def all_headers(self) -> list[tuple[str, str]]:
        return [("content-type", self.content_type), *self.headers]


def json_response(data: Any, status: int = 200, headers: Mapping[str, str] | None = None) -> Response:
    return Response(status, orjson.dumps(data), JSON, list(headers.items()) if headers else [])


def error_body(
    status: int, message: str, *, type: str | None = None, param: str | None = None, code: str | None = None
) -> bytes:
    kind = type or _STATUS_TYPE.get(status, "invalid_request_error" if status < 500 else "server_error")
    return orjson.dumps({"error": {"message": message, "type": kind, "param": param, "code": code}})


def error_response(
    status: int,
    message: str,
    *,
    type: str | None = None,
    param: str | None = None,
    code: str | None = None,
    headers: Mapping[str, str] | None = None,
) -> Response:
    body = error_body(status, message, type=type, param=param, code=code)
    return Response(status, body, JSON, list(headers.items()) if headers else [])


def request_error_response(exc: RequestError, headers: Mapping[str, str] | None = None) -> Response:
    return Response(exc.status, orjson.dumps(exc.to_dict()), JSON, list(headers.items()) if headers else [])
