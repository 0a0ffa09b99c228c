"""Synthetic completion text and the OpenAI response bytes around it, precomputed per request.

The streaming hot path of a simulated pod writes one SSE event per token for hundreds of concurrent
streams, so nothing is JSON-encoded per token: a request's chunk prefix and suffix are encoded once
(:class:`~mmgate.modelserver.openai_output.OpenAIWriter`) and each token is a pre-escaped word from a
small vocabulary.
"""

from __future__ import annotations

from typing import Any, Protocol

import orjson

from mmgate.modelserver.openai_output import OpenAIWriter, Usage
from mmgate.request.view import Api

_TEXT = (
    "The image shows a quiet street with parked cars and tall trees under a pale sky . "
    "A person in a red coat walks past a shop window while light rain falls on the pavement ; "
    "in the distance a tram turns the corner and the clock above the station reads ten past four"
)
_WORDS = _TEXT.split()
VOCAB: tuple[str, ...] = tuple(w if w in ".;," else " " + w for w in _WORDS)
_VOCAB_JSON: tuple[bytes, ...] = tuple(orjson.dumps(w) for w in VOCAB)


def token_text(index: int, offset: int = 0) -> str:
    return VOCAB[(index + offset) % len(VOCAB)]


def completion_text(n: int, offset: int = 0) -> str:
    return "".join(token_text(i, offset) for i in range(n))


class Writer(Protocol):
    """The bytes of one generated answer in its API's shape: the events that open a stream, one
    event per token, the events that close it (``[DONE]`` where the API has it), or one body."""

    def role_chunk(self) -> bytes: ...

    def tokens(self, start: int, count: int) -> bytes: ...

    def finish(self, reason: str, usage: Usage, extra: dict[str, Any] | None = None) -> bytes: ...

    def body(
        self, n_tokens: int, reason: str, usage: Usage, extra: dict[str, Any] | None = None
    ) -> bytes: ...


def vocab_json(index: int) -> bytes:
    """The JSON string (quoted, escaped) of the token at vocabulary position ``index``."""
    return _VOCAB_JSON[index % len(_VOCAB_JSON)]


def token_events(prefix: bytes, suffix: bytes, start: int, count: int) -> bytes:
    """One event per token ``start .. start+count-1``: ``prefix``, the token's JSON string, ``suffix``
    (``start`` includes the request's vocabulary offset)."""
    n = len(_VOCAB_JSON)
    if count == 1:
        return prefix + _VOCAB_JSON[start % n] + suffix
    return b"".join(prefix + _VOCAB_JSON[(start + i) % n] + suffix for i in range(count))


class ResponseWriter(OpenAIWriter):
    """A simulated chat or completions answer: :class:`~mmgate.modelserver.openai_output.OpenAIWriter`
    fed from the synthetic vocabulary (``offset`` picks where in it the request's text starts)."""

    __slots__ = ("_offset",)

    def __init__(
        self, api: Api, request_id: str, model: str, offset: int = 0, *, include_usage: bool = False
    ) -> None:
        super().__init__(api, request_id, model, include_usage=include_usage)
        self._offset = offset

    def tokens(self, start: int, count: int) -> bytes:
        """SSE events for tokens ``start .. start+count-1`` (one event per token, like vLLM)."""
        return token_events(self.prefix, self.suffix, start + self._offset, count)

    def body(self, n_tokens: int, reason: str, usage: Usage, extra: dict[str, Any] | None = None) -> bytes:
        """A whole non-streaming response."""
        return self.text_body(completion_text(n_tokens, self._offset), reason, usage, extra)
