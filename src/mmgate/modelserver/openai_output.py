"""The bytes of an OpenAI chat or completions answer: SSE chunks while streaming, or one JSON body.

A chunk's envelope (id, object, created, model, and the choice around the text) is encoded once per
request, and each text delta is spliced between its two halves: hundreds of concurrent streams
write one event per token, and only the delta itself is JSON-encoded per token. The shapes follow
vLLM's OpenAI server (an assistant role chunk first, the finish reason in a chunk of its own, the
usage chunk when ``stream_options.include_usage`` asks for it, then ``[DONE]``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import orjson

from mmgate.request.view import Api


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


class OpenAIWriter:
    """One answer of ``/v1/chat/completions`` (``Api.CHAT``) or ``/v1/completions``.

    ``prefix`` and ``suffix`` are the two halves of a streamed chunk around its text as a JSON
    string, so a caller holding pre-encoded strings can build events without this class."""

    __slots__ = ("_created", "_id", "_include_usage", "_model", "api", "prefix", "suffix")

    def __init__(self, api: Api, request_id: str, model: str, *, include_usage: bool = False) -> None:
        self.api = api
        self._id = request_id
        self._model = model
        self._created = int(time.time())
        self._include_usage = include_usage
        head = {"id": request_id, "object": self._chunk_object, "created": self._created, "model": model}
        start = orjson.dumps(head)[:-1]  # drop the closing brace, choices follow
        if api is Api.CHAT:
            self.prefix = b"data: " + start + b',"choices":[{"index":0,"delta":{"content":'
            self.suffix = b'},"logprobs":null,"finish_reason":null}]}\n\n'
        else:
            self.prefix = b"data: " + start + b',"choices":[{"index":0,"text":'
            self.suffix = b',"logprobs":null,"finish_reason":null,"stop_reason":null}]}\n\n'

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

    def delta(self, text: str) -> bytes:
        """One SSE event carrying ``text`` (a token's, or a few tokens' worth)."""
        return self.prefix + orjson.dumps(text) + self.suffix

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

    def text_body(self, text: str, reason: str, usage: Usage, extra: dict[str, Any] | None = None) -> bytes:
        """A whole non-streaming response with ``text`` as its answer."""
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
