"""Anthropic Messages answers (``/v1/messages``), in the shape vLLM's Anthropic endpoint sends.

A stream is ``message_start``, ``content_block_start``, one ``content_block_delta`` per token,
``content_block_stop``, ``message_delta`` (stop reason, output tokens) and ``message_stop``, each an
SSE event with its ``event:`` name; there is no ``[DONE]``.
"""

from __future__ import annotations

from typing import Any

import orjson

from mmgate.modelserver.openai_output import Usage
from mmgate.sim.output import completion_text, token_events

_STOP_REASONS = {"stop": "end_turn", "length": "max_tokens"}


def _event(name: str, doc: dict[str, Any]) -> bytes:
    return b"event: " + name.encode() + b"\ndata: " + orjson.dumps(doc) + b"\n\n"


class MessagesWriter:
    __slots__ = ("_id", "_model", "_offset", "_prompt_tokens")

    _PREFIX = (
        b"event: content_block_delta\n"
        b'data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":'
    )
    _SUFFIX = b"}}\n\n"

    def __init__(self, request_id: str, model: str, offset: int = 0, *, prompt_tokens: int = 0) -> None:
        self._id = request_id if request_id.startswith("msg_") else f"msg_{request_id}"
        self._model = model
        self._offset = offset
        self._prompt_tokens = prompt_tokens

    def _message(
        self, content: list[dict[str, Any]], stop: str | None, usage: Usage | None
    ) -> dict[str, Any]:
        return {
            "id": self._id,
            "type": "message",
            "role": "assistant",
            "model": self._model,
            "content": content,
            "stop_reason": stop,
            "stop_sequence": None,
            "usage": {
                "input_tokens": usage.prompt_tokens if usage else self._prompt_tokens,
                "output_tokens": usage.completion_tokens if usage else 0,
            },
        }

    def role_chunk(self) -> bytes:
        return _event(
            "message_start", {"type": "message_start", "message": self._message([], None, None)}
        ) + _event(
            "content_block_start",
            {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        )

    def tokens(self, start: int, count: int) -> bytes:
        return token_events(self._PREFIX, self._SUFFIX, start + self._offset, count)

    def finish(self, reason: str, usage: Usage, extra: dict[str, Any] | None = None) -> bytes:
        delta = {
            "type": "message_delta",
            "delta": {"stop_reason": _STOP_REASONS.get(reason, reason), "stop_sequence": None},
            "usage": {"output_tokens": usage.completion_tokens},
        }
        return (
            _event("content_block_stop", {"type": "content_block_stop", "index": 0})
            + _event("message_delta", delta)
            + _event("message_stop", {"type": "message_stop"})
        )

    def body(self, n_tokens: int, reason: str, usage: Usage, extra: dict[str, Any] | None = None) -> bytes:
        text = completion_text(n_tokens, self._offset)
        doc = self._message([{"type": "text", "text": text}], _STOP_REASONS.get(reason, reason), usage)
        return orjson.dumps(doc)
