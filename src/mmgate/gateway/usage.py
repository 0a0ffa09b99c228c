"""The output tokens an answer reports, read from the bytes a transport relays.

Flow control's media-aware fairness charges a flow for the output its requests generate. At
dispatch it charges an estimate (``max_tokens``, else a default); once the answer is over, the
transport reports what the pod says it generated and the controller corrects the charge
(:meth:`mmgate.control.controller.RequestController.usage`). The pod says it in the OpenAI
``usage`` object: at the end of a JSON answer, and in a stream's last data event when the client
asked for ``stream_options.include_usage`` (vLLM; with ``continuous_usage_stats`` every event has
one, the last holding the total). Anthropic's Messages API and OpenAI's Responses API name the
count ``output_tokens``.

Only the end of an answer is kept (:data:`TAIL` bytes), never the whole: the ``usage`` object is
found as the last ``"usage":{`` in it and its braces matched, so a long answer whose head has
been dropped is still read, and nothing but that object is parsed. The bytes come from a pod and
are not trusted: a malformed or absent object, or counts that are not non-negative integers,
read as "not reported", never as an error.

A stream without usage is counted instead (:class:`UsageMeter`): each content event carries at
least one generated token (vLLM sends one per event unless its ``--stream-interval`` batches
them), so the events less those that carry none (chat: the assistant-role event, the finish-reason
event and ``[DONE]``; completions: the last two) are a lower bound of the output, exact at one
token per event. Counting is a ``bytes.count`` per chunk.
"""

from __future__ import annotations

import orjson

from mmgate.control.controller import Usage
from mmgate.request.view import Api, RequestView

TAIL = 64 * 1024
"""The end of an answer kept to read its ``usage`` from."""
_KEY = b'"usage":'
_MAX_OBJECT = 4096  # a usage object is a few hundred bytes; a longer "object" is not one
_MAX_COUNT = 1 << 40  # a count beyond this is not one


def usage_of(tail: bytes | bytearray) -> Usage | None:
    """The last ``usage`` object in ``tail`` (a JSON answer's end, or a stream's last events);
    ``None`` when it holds none that reports output tokens."""
    end = len(tail)
    while True:
        at = tail.rfind(_KEY, 0, end)
        if at < 0:
            return None
        end = at
        if at and tail[at - 1] == 0x5C:  # \"usage\": inside a JSON string (generated text)
            continue
        found = _object_at(tail, at + len(_KEY))
        if found is not None:
            return found


def _object_at(data: bytes | bytearray, start: int) -> Usage | None:
    """The usage object starting (after whitespace) at ``start``: its braces matched by
    searching for the next brace (its values are numbers and small objects, no strings with
    braces in them), then parsed. At most :data:`_MAX_OBJECT` bytes are looked at."""
    i = start
    size = len(data)
    while i < size and data[i] in b" \t\r\n":
        i += 1
    if i >= size or data[i] != 0x7B:  # "usage": null, or cut off
        return None
    limit = min(size, i + _MAX_OBJECT)
    depth = 1
    j = i + 1
    while True:
        close = data.find(b"}", j, limit)
        if close < 0:
            return None
        opened = data.find(b"{", j, close)
        if opened >= 0:
            depth += 1
            j = opened + 1
            continue
        depth -= 1
        j = close + 1
        if not depth:
            return _usage(data[i:j])


def _usage(text: bytes | bytearray) -> Usage | None:
    try:
        doc = orjson.loads(text)
    except orjson.JSONDecodeError:
        return None
    if type(doc) is not dict:
        return None
    output = doc.get("completion_tokens")
    if output is None:
        output = doc.get("output_tokens")
    if type(output) is not int or not 0 <= output < _MAX_COUNT:  # also refuses a bool
        return None
    prompt = doc.get("prompt_tokens")
    if prompt is None:
        prompt = doc.get("input_tokens")
    details = doc.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if type(details) is dict else None
    return Usage(_count(prompt), output, _count(cached))


def _count(value: object) -> int:
    """``value`` when it is a token count (a non-negative integer, not absurdly large), else 0."""
    return value if type(value) is int and 0 <= value < _MAX_COUNT else 0


class UsageMeter:
    """Fed every chunk of one answer as it is relayed: keeps its end and, for a stream, counts
    its events (blank-line terminated), so :meth:`usage` can say what was generated.
    ``overhead``: the events of a stream that carry no generated token."""

    __slots__ = ("_events", "_newline", "_overhead", "_stream", "_tail")

    def __init__(self, stream: bool, overhead: int = 2) -> None:
        self._stream = stream
        self._overhead = overhead
        self._tail: bytes | bytearray = b""  # the first chunk as it came; a buffer from the second
        self._events = 0
        self._newline = False  # the previous chunk ended with a newline (an event may end across)

    @classmethod
    def of(cls, view: RequestView) -> UsageMeter:
        """The meter for an answer to ``view`` (vLLM's chat streams open with a role event)."""
        return cls(view.stream, 3 if view.api is Api.CHAT else 2)

    def feed(self, chunk: bytes) -> None:
        if not chunk:
            return
        if self._stream:
            self._events += chunk.count(b"\n\n") + (self._newline and chunk[0] == 0x0A)
            self._newline = chunk[-1] == 0x0A
        tail = self._tail
        if not tail:  # most JSON answers come in one chunk: kept without a copy
            self._tail = chunk
            return
        buffer = tail if isinstance(tail, bytearray) else bytearray(tail)
        buffer += chunk
        if len(buffer) > TAIL:
            del buffer[: len(buffer) - TAIL]
        self._tail = buffer

    def usage(self) -> Usage | None:
        """What the answer reported; for a stream that reported none, its content events
        counted; ``None`` for a JSON answer without usage."""
        found = usage_of(self._tail)
        if found is None and self._stream and self._events:
            found = Usage(completion_tokens=max(0, self._events - self._overhead))
        return found
