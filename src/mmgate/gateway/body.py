"""Moving request bodies upstream with as few copies as possible.

A three-image request is 2.3 MB; every copy of it costs the gateway a few hundred microseconds
(and fresh pages). On Python < 3.12.9 aiohttp's client writer joins the request head and the
body into one buffer before writing; :class:`ForwardedBody` avoids that copy.
"""

from __future__ import annotations

from typing import Any

from aiohttp import payload
from aiohttp.abc import AbstractStreamWriter

_HEAD_SLICE = 1
"""Bytes of a large body sent together with the request head (aiohttp joins these two)."""
_JOIN_BELOW = 64 * 1024
"""Bodies smaller than this go out in one write with the head: a copy is cheaper than a syscall."""


class ForwardedBody(payload.BytesPayload):
    """The client's body bytes, written upstream without being joined to the request head."""

    def __init__(self, value: bytes, **kwargs: Any) -> None:
        super().__init__(value, **kwargs)

    async def write(self, writer: AbstractStreamWriter) -> None:
        await self.write_with_length(writer, None)

    async def write_with_length(self, writer: AbstractStreamWriter, content_length: int | None) -> None:
        value: bytes = self._value
        if len(value) < _JOIN_BELOW:
            await writer.write(value if content_length is None else value[:content_length])
            return
        view = memoryview(value)
        if content_length is not None:
            view = view[:content_length]
        # The head goes out with a tiny first slice; the rest is one write of a view (no copy).
        await writer.write(view[:_HEAD_SLICE])
        if len(view) > _HEAD_SLICE:
            await writer.write(view[_HEAD_SLICE:])
