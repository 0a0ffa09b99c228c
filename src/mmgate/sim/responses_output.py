"""OpenAI Responses API answers (``/v1/responses``), in the shape vLLM's Responses endpoint sends.

A stream is a sequence of named SSE events, each with a ``sequence_number``:
``response.created``, ``response.in_progress``, ``response.output_item.added``,
``response.content_part.added``, one ``response.output_text.delta`` per token, then
``response.output_text.done``, ``response.content_part.done``, ``response.output_item.done`` and
``response.completed`` with the whole response and its usage; there is no ``[DONE]``.
"""

from __future__ import annotations

import time
from typing import Any

import orjson

from mmgate.modelserver.openai_output import Usage
from mmgate.sim.output import completion_text, vocab_json

_OPENING = 4  # events before the first delta


class ResponsesWriter:
    __slots__ = ("_created", "_delta_prefix", "_id", "_item", "_model", "_offset")

    def __init__(self, request_id: str, model: str, offset: int = 0) -> None:
        self._id = request_id if request_id.startswith("resp_") else f"resp_{request_id}"
        self._item = f"msg_{request_id}"
        self._model = model
        self._offset = offset
        self._created = int(time.time())
        head = {
            "type": "response.output_text.delta",
            "item_id": self._item,
            "output_index": 0,
            "content_index": 0,
        }
        self._delta_prefix = (
            b"event: response.output_text.delta\ndata: " + orjson.dumps(head)[:-1] + b',"delta":'
        )

    def _event(self, name: str, seq: int, fields: dict[str, Any]) -> bytes:
        doc = {"type": name, "sequence_number": seq, **fields}
        return b"event: " + name.encode() + b"\ndata: " + orjson.dumps(doc) + b"\n\n"

    def _message(self, text: str | None, status: str) -> dict[str, Any]:
        content = (
            [] if text is None else [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}]
        )
        return {
            "id": self._item,
            "type": "message",
            "role": "assistant",
            "status": status,
            "content": content,
        }

    def _response(
        self, status: str, output: list[dict[str, Any]], usage: Usage | None, reason: str
    ) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "id": self._id,
            "object": "response",
            "created_at": self._created,
            "model": self._model,
            "status": status,
            "output": output,
            "incomplete_details": {"reason": "max_output_tokens"} if reason == "length" else None,
            "error": None,
            "instructions": None,
            "metadata": {},
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": [],
            "usage": None,
        }
        if usage is not None:
            doc["usage"] = {
                "input_tokens": usage.prompt_tokens,
                "input_tokens_details": {"cached_tokens": usage.cached_tokens},
                "output_tokens": usage.completion_tokens,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": usage.prompt_tokens + usage.completion_tokens,
            }
        return doc

    def role_chunk(self) -> bytes:
        started = self._response("in_progress", [], None, "")
        part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
        return (
            self._event("response.created", 0, {"response": started})
            + self._event("response.in_progress", 1, {"response": started})
            + self._event(
                "response.output_item.added",
                2,
                {"output_index": 0, "item": self._message(None, "in_progress")},
            )
            + self._event(
                "response.content_part.added",
                3,
                {"item_id": self._item, "output_index": 0, "content_index": 0, "part": part},
            )
        )

    def tokens(self, start: int, count: int) -> bytes:
        prefix = self._delta_prefix
        base = start + self._offset
        return b"".join(
            prefix
            + vocab_json(base + i)
            + b',"logprobs":[],"sequence_number":%d}\n\n' % (_OPENING + start + i)
            for i in range(count)
        )

    def finish(self, reason: str, usage: Usage, extra: dict[str, Any] | None = None) -> bytes:
        seq = _OPENING + usage.completion_tokens
        text = completion_text(usage.completion_tokens, self._offset)
        where = {"item_id": self._item, "output_index": 0, "content_index": 0}
        part = {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
        status = "incomplete" if reason == "length" else "completed"
        message = self._message(text, "completed")
        return (
            self._event("response.output_text.done", seq, {**where, "text": text, "logprobs": []})
            + self._event("response.content_part.done", seq + 1, {**where, "part": part})
            + self._event("response.output_item.done", seq + 2, {"output_index": 0, "item": message})
            + self._event(
                "response.completed", seq + 3, {"response": self._response(status, [message], usage, reason)}
            )
        )

    def body(self, n_tokens: int, reason: str, usage: Usage, extra: dict[str, Any] | None = None) -> bytes:
        status = "incomplete" if reason == "length" else "completed"
        message = self._message(completion_text(n_tokens, self._offset), "completed")
        return orjson.dumps(self._response(status, [message], usage, reason))
