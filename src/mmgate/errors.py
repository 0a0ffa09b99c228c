"""One error type for everything a client can get wrong, carrying the OpenAI error shape.

Every layer (parsing, pricing, config for requests) raises :class:`RequestError`; the gateway turns
it into ``{"error": {"message", "type", "param", "code"}}`` with ``status``. ``param`` names the
offending field as a path such as ``messages[0].content[2].image_url.url``.

:func:`did_you_mean` is the one spelling hint shared by every "unknown name" message (config keys,
plugin types, model families, providers, profiles, subcommands).
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from typing import Any


def did_you_mean(name: str, valid: Iterable[str]) -> str:
    """`` (did you mean 'qwen3-vl'?)`` when one valid name is close to ``name`` (case-insensitive),
    else ``""``: meant to follow ``unknown family 'qwen3vl'`` in a message."""
    choices = {v.lower(): v for v in valid}
    hint = difflib.get_close_matches(name.lower(), list(choices), n=1, cutoff=0.6)
    return f" (did you mean {choices[hint[0]]!r}?)" if hint else ""


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
