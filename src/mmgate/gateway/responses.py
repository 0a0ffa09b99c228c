"""OpenAI-shaped error responses (``{"error": {message, type, param, code}}``)."""

from __future__ import annotations

import orjson
from aiohttp import web

from mmgate.errors import RequestError

_STATUS_TYPE = {
    404: "not_found_error",
    405: "invalid_request_error",
    413: "invalid_request_error",
    429: "rate_limit_error",
    502: "upstream_error",
    503: "service_unavailable",
    504: "timeout_error",
}


def error_response(
    status: int,
    message: str,
    *,
    type: str | None = None,
    param: str | None = None,
    code: str | None = None,
    headers: dict[str, str] | None = None,
) -> web.Response:
    kind = type or _STATUS_TYPE.get(status, "invalid_request_error" if status < 500 else "server_error")
    body = {"error": {"message": message, "type": kind, "param": param, "code": code}}
    return web.Response(
        status=status, body=orjson.dumps(body), content_type="application/json", headers=headers
    )


def request_error_response(exc: RequestError, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(
        status=exc.status, body=orjson.dumps(exc.to_dict()), content_type="application/json", headers=headers
    )
