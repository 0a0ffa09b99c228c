"""Moving request bodies through the gateway with as few copies as possible.

A three-image request is 2.3 MB; every copy of it costs the gateway a few hundred microseconds
(and fresh pages). aiohttp's defaults make three on the way in (``Request.read`` grows a
bytearray, joins buffered chunks, then copies to ``bytes``) and one on the way out (on Python
< 3.12.9 its writer joins the request head and the body into one buffer before writing).
:func:`read_body` makes exactly one (joining the received chunks), :class:`ForwardedBody` none.
"""

from __future__ import annotations

from typing import Any

from aiohttp import payload, web
from aiohttp.abc import AbstractStreamWriter

_HEAD_SLICE = 1
"""Bytes of a large body sent together with the request head (aiohttp joins these two)."""
_JOIN_BELOW = 64 * 1024
"""Bodies smaller than this go out in one write with the head: a copy is cheaper than a syscall."""


async def read_body(request: web.Request, limit: int) -> bytes:
    """The whole request body as one ``bytes`` object, refusing more than ``limit`` bytes.

    Raises :class:`aiohttp.web.HTTPRequestEntityTooLarge` like ``Request.read`` does.
    """
    declared = request.content_length
    if declared is not None and declared > limit:
        raise web.HTTPRequestEntityTooLarge(max_size=limit, actual_size=declared)
    content = request.content
    # Let the whole body buffer without pausing the socket every 128 KiB (as Request.read does).
    raise_limits = getattr(content, "set_read_chunk_size", None)  # aiohttp >= 3.13
    if raise_limits is not None:
        raise_limits(min(declared, limit) if declared else limit)
    chunks: list[bytes] = []
    size = 0
    while True:
        # readchunk hands over buffered chunks one by one (readany would join them first).
        chunk, _ = await content.readchunk()
        if not chunk:
            break
        size += len(chunk)
        if size > limit:
            raise web.HTTPRequestEntityTooLarge(max_size=limit, actual_size=size)
        chunks.append(chunk)
    if len(chunks) == 1:
        return chunks[0]
    return b"".join(chunks)


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
