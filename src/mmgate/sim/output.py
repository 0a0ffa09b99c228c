"""Synthetic completion text and the OpenAI response bytes around it, precomputed per request.

The streaming hot path of a simulated pod writes one SSE event per token for hundreds of concurrent
streams, so nothing is JSON-encoded per token: a request's chunk prefix and suffix are encoded once
and each token is a pre-escaped word from a small vocabulary.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Protocol

import orjson

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


@dataclass(slots=True)
class Usage:
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "prompt_tokens": self.prompt_tokens,
            "total_tokens": self.prompt_tokens + self.completion_tokens,
            "completion_tokens": self.completion_tokens,
            "prompt_tokens_details": {"cached_tokens": self.cached_tokens},
        }


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


class ResponseWriter:
    """Builds the bytes of one OpenAI chat or completions response: SSE chunks while streaming
    (the usage chunk when the client asked for it), or the final JSON body."""

    __slots__ = ("_created", "_id", "_include_usage", "_model", "_offset", "_prefix", "_suffix", "api")

    def __init__(
        self, api: Api, request_id: str, model: str, offset: int = 0, *, include_usage: bool = False
    ) -> None:
        self.api = api
        self._id = request_id
        self._model = model
        self._created = int(time.time())
        self._offset = offset
        self._include_usage = include_usage
        head = {"id": request_id, "object": self._chunk_object, "created": self._created, "model": model}
        start = orjson.dumps(head)[:-1]  # drop the closing brace, choices follow
        if api is Api.CHAT:
            self._prefix = b"data: " + start + b',"choices":[{"index":0,"delta":{"content":'
            self._suffix = b'},"logprobs":null,"finish_reason":null}]}\n\n'
        else:
            self._prefix = b"data: " + start + b',"choices":[{"index":0,"text":'
            self._suffix = b',"logprobs":null,"finish_reason":null,"stop_reason":null}]}\n\n'

    @property
    def _chunk_object(self) -> str:
        return "chat.completion.chunk" if self.api is Api.CHAT else "text_completion"

    def role_chunk(self) -> bytes:
        """vLLM's first chat chunk announces the assistant role with empty content."""
        if self.api is not Api.CHAT:
            return b""
        return self._event(
            [
                {
                    "index": 0,
                    "delta": {"role": "assistant", "content": ""},
                    "logprobs": None,
                    "finish_reason": None,
                }
            ]
        )

    def tokens(self, start: int, count: int) -> bytes:
        """SSE events for tokens ``start .. start+count-1`` (one event per token, like vLLM)."""
        return token_events(self._prefix, self._suffix, start + self._offset, count)

    def finish(self, reason: str, usage: Usage, extra: dict[str, Any] | None = None) -> bytes:
        """The closing chunk (finish reason), the usage chunk when asked for, and ``[DONE]``."""
        if self.api is Api.CHAT:
            choice: dict[str, Any] = {"index": 0, "delta": {}, "logprobs": None, "finish_reason": reason}
        else:
            choice = {"index": 0, "text": "", "logprobs": None, "finish_reason": reason, "stop_reason": None}
        out = self._event([choice], extra)
        if self._include_usage:
            out += self._event([], {"usage": usage.to_dict()})
        return out + b"data: [DONE]\n\n"

    def body(self, n_tokens: int, reason: str, usage: Usage, extra: dict[str, Any] | None = None) -> bytes:
        """A whole non-streaming response."""
        text = completion_text(n_tokens, self._offset)
        if self.api is Api.CHAT:
            choice: dict[str, Any] = {
                "index": 0,
                "message": {"role": "assistant", "content": text, "tool_calls": []},
                "logprobs": None,
                "finish_reason": reason,
                "stop_reason": None,
            }
            obj = "chat.completion"
        else:
            choice = {
                "index": 0,
                "text": text,
                "logprobs": None,
                "finish_reason": reason,
                "stop_reason": None,
            }
            obj = "text_completion"
        doc: dict[str, Any] = {
            "id": self._id,
            "object": obj,
            "created": self._created,
            "model": self._model,
            "choices": [choice],
            "usage": usage.to_dict(),
        }
        if extra:
            doc.update(extra)
        return orjson.dumps(doc)

    def _event(self, choices: list[dict[str, Any]], extra: dict[str, Any] | None = None) -> bytes:
        doc: dict[str, Any] = {
            "id": self._id,
            "object": self._chunk_object,
            "created": self._created,
            "model": self._model,
            "choices": choices,
        }
        if extra:
            doc.update(extra)
        return b"data: " + orjson.dumps(doc) + b"\n\n"
