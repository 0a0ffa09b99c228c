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


def usage_of(tail: bytes) -> Usage | None:
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


def _object_at(data: bytes, start: int) -> Usage | None:
    """The usage object starting (after whitespace) at ``start``: its braces matched (its values
    are numbers and one nested object, no strings with braces in them), then parsed."""
    i = start
    while i < len(data) and data[i] in b" \t\r\n":
        i += 1
    if i >= len(data) or data[i] != 0x7B:  # "usage": null, or cut off
        return None
    depth = 0
    for j in range(i, min(len(data), i + 4096)):
        c = data[j]
        if c == 0x7B:
            depth += 1
        elif c == 0x7D:
            depth -= 1
            if not depth:
                return _usage(data[i : j + 1])
    return None


def _usage(text: bytes) -> Usage | None:
    try:
        doc = orjson.loads(text)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(doc, dict):
        return None
    output = _count(doc.get("completion_tokens", doc.get("output_tokens")))
    if output is None:
        return None
    details = doc.get("prompt_tokens_details")
    cached = _count(details.get("cached_tokens")) if isinstance(details, dict) else None
    return Usage(
        prompt_tokens=_count(doc.get("prompt_tokens", doc.get("input_tokens"))) or 0,
        completion_tokens=output,
        cached_tokens=cached or 0,
    )


def _count(value: object) -> int | None:
    """``value`` when it is a token count (a non-negative integer, not absurdly large)."""
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 1 << 40:
        return value
    return None


class UsageMeter:
    """Fed every chunk of one answer as it is relayed: keeps its end and, for a stream, counts
    its events (blank-line terminated), so :meth:`usage` can say what was generated.
    ``overhead``: the events of a stream that carry no generated token."""

    __slots__ = ("_events", "_newline", "_overhead", "_stream", "_tail")

    def __init__(self, stream: bool, overhead: int = 2) -> None:
        self._stream = stream
        self._overhead = overhead
        self._tail = bytearray()
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
        tail += chunk
        if len(tail) > TAIL:
            del tail[: len(tail) - TAIL]

    def usage(self) -> Usage | None:
        """What the answer reported; for a stream that reported none, its content events
        counted; ``None`` for a JSON answer without usage."""
        found = usage_of(bytes(self._tail))
        if found is None and self._stream and self._events:
            found = Usage(completion_tokens=max(0, self._events - self._overhead))
        return found
