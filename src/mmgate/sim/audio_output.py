"""Speech-to-text answers (``/v1/audio/transcriptions``, ``/v1/audio/translations``), in vLLM's
shapes: a body ``{"text", "usage": {"type": "duration", "seconds"}}``, or a stream of
``transcription.chunk`` (``translation.chunk``) events with one ``delta.content`` per token, a
closing chunk with the finish reason, and ``data: [DONE]``.
"""

from __future__ import annotations

import math
import time
from typing import Any

import orjson

from mmgate.modelserver.openai_output import Usage
from mmgate.request.view import Api
from mmgate.sim.output import completion_text, token_events


class SpeechWriter:
    __slots__ = ("_created", "_duration_s", "_id", "_model", "_object", "_offset", "_prefix")

    _SUFFIX = b"}}]}\n\n"

    def __init__(
        self, api: Api, request_id: str, model: str, offset: int = 0, *, duration_s: float = 0.0
    ) -> None:
        self._id = request_id
        self._model = model
        self._offset = offset
        self._duration_s = duration_s
        self._created = int(time.time())
        self._object = "translation.chunk" if api is Api.TRANSLATIONS else "transcription.chunk"
        head = {"id": request_id, "object": self._object, "created": self._created, "model": model}
        self._prefix = b"data: " + orjson.dumps(head)[:-1] + b',"choices":[{"delta":{"content":'

    def role_chunk(self) -> bytes:
        return b""

    def tokens(self, start: int, count: int) -> bytes:
        return token_events(self._prefix, self._SUFFIX, start + self._offset, count)

    def finish(self, reason: str, usage: Usage, extra: dict[str, Any] | None = None) -> bytes:
        doc = {
            "id": self._id,
            "object": self._object,
            "created": self._created,
            "model": self._model,
            "choices": [{"delta": {}, "finish_reason": reason, "stop_reason": None}],
        }
        return b"data: " + orjson.dumps(doc) + b"\n\ndata: [DONE]\n\n"

    def body(self, n_tokens: int, reason: str, usage: Usage, extra: dict[str, Any] | None = None) -> bytes:
        seconds = math.ceil(self._duration_s)
        return orjson.dumps(
            {
                "text": completion_text(n_tokens, self._offset).strip(),
                "usage": {"type": "duration", "seconds": seconds},
            }
        )
