"""Where things sit in a chat body's bytes: one structural walk, shared by the decode and the splice.

Two steps need byte offsets that a JSON decoder does not give: cutting inline data URIs out before
the skeleton decode (:func:`mmgate.request.decode.cut_data_urls`) needs each ``"url":"data:..."``
value's quotes, and writing media uuids (:mod:`mmgate.request.media_uuids`) needs where each
content part object ``messages[i].content[j]`` closes. One walk finds both, so a large image body
is walked once per request: the parser records the :class:`ChatLayout` on the view, and the splice
reuses it.

The walk keeps one entry per open container (object or array, its current key or index) and
jumps over strings with ``bytes.find`` (memchr: base64 holds no quote), so its cost is a memchr
over the payloads plus a step per JSON token outside them. It is exact for valid JSON; the parse
runs it before decoding, on bytes not yet known to be JSON, so anything that cannot be JSON gives
``None`` rather than an error (the decoder then words the client's mistake).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import msgspec

# One match per token: a short string without escapes, whole (group 1; group 2 when a colon
# follows, making it a key), or the opening quote of any other string (3), or a bracket (4, 5).
# The repeat is possessive: at a long string's quote it gives up after 256 bytes, not 256 retries.
_TOKEN = re.compile(rb'"([^"\\]{0,256}+)"(?:[ \t\r\n]*(:))?|(")|([{\[])|([}\]])')
_SHORT, _KEY, _LONG, _OPEN, _CLOSE = 1, 2, 3, 4, 5
_COLON = re.compile(rb"[ \t\r\n]*:")  # JSON's whitespace, then the colon that ends a key
Part = tuple[int, int]
"""``(i, j)`` of the content part ``messages[i].content[j]``."""


@dataclass(frozen=True, slots=True, eq=False)
class ChatLayout:
    """What the walk of ``body`` found."""

    body: bytes
    """The bytes walked: the offsets hold for this object only."""
    part_ends: dict[Part, int]
    """The offset of the closing ``}`` of each content part object."""
    repeated_key: bool
    """Some object at depth 0, 2 or 4 (the root, a message, a part, or what sits at those depths
    elsewhere) repeats a key: decoders disagree on which copy counts."""
    data_urls: tuple[tuple[int, int], ...]
    """The offsets of the opening and closing quote of every object member ``"url"`` whose string
    value starts with ``data:``, in order."""


def scan_chat(body: bytes, max_tokens: int | None = None) -> ChatLayout | None:
    """The layout of ``body``; ``None`` when it cannot be JSON or when the walk would take more
    than ``max_tokens`` strings and brackets (a caller's bound on its cost)."""
    # The innermost open container is held in locals: whether it is an object, its current key
    # (object) or the index of its current object or array element (array), and the keys it has
    # seen where a repeat is looked for. Opening a container pushes its parent's, closing pops it
    # back, so ``outer[k]`` is the container at depth k (``outer[0]``: outside the root). The
    # steps are bytecode and match attributes wherever they can be, no function calls: this
    # walk runs on every large chat request.
    is_object = False
    key = b""
    index = -1
    keys: dict[bytes, None] | None = None
    depth = 0
    outer: list[tuple[bool, bytes, int, dict[bytes, None] | None]] = []
    ends: dict[Part, int] = {}
    urls: list[tuple[int, int]] = []
    repeated = False
    budget = -1 if max_tokens is None else max_tokens
    at = 0
    while True:
        for token in _TOKEN.finditer(body, at):
            budget -= 1
            if budget == 0:
                return None
            kind = token.lastindex
            if kind == _OPEN:
                if not is_object:
                    index += 1  # an array's objects and arrays are counted; content parts are objects
                outer.append((is_object, key, index, keys))
                depth += 1
                is_object = token[_OPEN] == b"{"
                index = -1
                keys = {} if is_object and (depth == 1 or depth == 3 or depth == 5) else None
            elif kind == _CLOSE:
                if not depth:
                    return None
                if is_object and depth == 5 and outer[1][1] == b"messages" and outer[3][1] == b"content":
                    ends[(outer[2][2], outer[4][2])] = token.start()
                is_object, key, index, keys = outer[-1]
                del outer[-1]
                depth -= 1
            elif kind == _KEY:
                if is_object:
                    key = token[_SHORT]
                    if keys is not None:
                        if key in keys:
                            repeated = True
                        keys[key] = None
            elif kind == _SHORT:
                if is_object and key == b"url" and token[_SHORT].startswith(b"data:"):
                    start, end = token.span()
                    urls.append((start, end - 1))
            else:  # a long string, or one with escapes: jump to its closing quote with memchr
                break
        else:
            break
        start = token.start()
        end = body.find(b'"', start + 1)
        while end > 0 and body[end - 1] == 0x5C and _escaped(body, end):  # most end unescaped
            end = body.find(b'"', end + 1)
        if end < 0:
            return None
        if is_object:
            if _COLON.match(body, end + 1):  # in an object, a key is the string a ':' follows
                key = _unescaped(body, start, end)
                if keys is not None:
                    if key in keys:
                        repeated = True
                    keys[key] = None
            elif key == b"url" and body.startswith(b"data:", start + 1):
                urls.append((start, end))
        at = end + 1
    if depth:
        return None
    return ChatLayout(body, ends, repeated, tuple(urls))


def _unescaped(body: bytes, start: int, end: int) -> bytes:
    """The UTF-8 of the string whose quotes are at ``start`` and ``end``, its escapes decoded (a
    broken one, in bytes not yet known to be JSON, leaves the bytes as they are: the decoder will
    refuse them)."""
    text = body[start : end + 1]
    try:
        key = msgspec.json.decode(text)
    except msgspec.DecodeError:
        return text
    return key.encode("utf-8", "surrogatepass") if isinstance(key, str) else text


def _escaped(body: bytes, quote: int) -> bool:
    """Whether the quote at ``quote`` is escaped (an odd run of backslashes before it)."""
    run = 0
    while body[quote - 1 - run] == 0x5C:
        run += 1
    return run % 2 == 1
