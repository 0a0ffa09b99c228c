"""The generation fields of an OpenAI request body that a model server honours (the prompt itself
is read elsewhere: the gateway's parser for the simulator, the engine's prompt reader for the
reference engine). A wrong type or an impossible limit is a 400 naming the field, as vLLM answers."""

from __future__ import annotations

from typing import Any, TypeVar

import msgspec

from mmgate.errors import RequestError


class _StreamOptions(msgspec.Struct):
    include_usage: bool = False


class Knobs(msgspec.Struct):
    """Streaming, the output limit under each API's name, and the disaggregation parameters."""

    stream: bool = False
    stream_options: _StreamOptions | None = None
    ignore_eos: bool = False
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    max_output_tokens: int | None = None  # the Responses API's name
    dimensions: int | None = None  # embeddings
    encoding_format: str = "float"  # embeddings: "float" or "base64"
    top_n: int = 0  # rerank
    n: int = 1  # chat and completions: how many choices to generate for the prompt
    kv_transfer_params: Any = None
    ec_transfer_params: Any = None

    @property
    def include_usage(self) -> bool:
        return self.stream_options is not None and self.stream_options.include_usage

    @property
    def limit(self) -> int | None:
        for value in (self.max_completion_tokens, self.max_output_tokens):
            if value is not None:
                return value
        return self.max_tokens

    @property
    def limit_name(self) -> str:
        if self.max_completion_tokens is not None:
            return "max_completion_tokens"
        return "max_output_tokens" if self.max_output_tokens is not None else "max_tokens"

    def checked_limit(self) -> int | None:
        """:attr:`limit`, refused (400) below 1."""
        limit = self.limit
        if limit is not None and limit < 1:
            raise RequestError(f"{self.limit_name} must be at least 1, got {limit}", param=self.limit_name)
        return limit

    def checked_choices(self, *, streamable: bool = True) -> int:
        """``n``, refused (400 naming ``n``) below 1, or above 1 when ``streamable`` is False
        (a server that cannot stream several choices says so instead of sending one)."""
        if self.n < 1:
            raise RequestError(f"n must be at least 1, got {self.n}", param="n")
        if self.n > 1 and self.stream and not streamable:
            raise RequestError("n > 1 is not supported with stream: true here; send stream: false", param="n")
        return self.n


_KNOBS = msgspec.json.Decoder(Knobs)

T = TypeVar("T")


def read_knobs(body: bytes) -> Knobs:
    """The knobs of a JSON body (:func:`decode_body`)."""
    return decode_body(_KNOBS, body)


def decode_body(decoder: msgspec.json.Decoder[T], body: bytes) -> T:
    """``body`` decoded; :class:`RequestError` for a body that is not JSON or a field of the wrong
    type (naming the field)."""
    try:
        return decoder.decode(body)
    except msgspec.ValidationError as exc:
        raise RequestError(str(exc), param=field_of(exc)) from None
    except msgspec.DecodeError as exc:
        raise RequestError(f"request body is not valid JSON: {exc}") from None


def field_of(exc: msgspec.ValidationError) -> str | None:
    """``Expected `int`, got `str` - at `$.max_tokens``` → ``max_tokens``."""
    text = str(exc)
    marker = "at `$."
    if marker not in text:
        return None
    return text.rsplit(marker, 1)[1].rstrip("`")
