"""One error type for everything a client can get wrong, carrying the OpenAI error shape.

Every layer (parsing, pricing, config for requests) raises :class:`RequestError`; the gateway turns
it into ``{"error": {"message", "type", "param", "code"}}`` with ``status``. ``param`` names the
offending field as a path such as ``messages[0].content[2].image_url.url``.
"""

from __future__ import annotations

from typing import Any


class RequestError(ValueError):
    """A client mistake: refused with a 4xx and a message that names the field."""

    def __init__(
        self,
        message: str,
        *,
        param: str | None = None,
        status: int = 400,
        type: str = "invalid_request_error",
        code: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.status = status
        self.type = type
        self.code = code

    def to_dict(self) -> dict[str, Any]:
        """The OpenAI error body."""
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}
