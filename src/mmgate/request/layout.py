"""Where things sit in a chat body's bytes: one structural walk, shared by the decode and the splice.

Two steps need byte offsets that a JSON decoder does not give: cutting inline data URIs out before
the skeleton decode (:func:`mmgate.request.decode.cut_data_urls`) needs each ``"url":"data:..."``
value's quotes, and writing media uuids (:mod:`mmgate.request.media_uuids`) needs where each
content part object ``messages[i].content[j]`` closes. One walk finds both, so a large image body
is walked once per request: the parser records the :class:`ChatLayout` on the view, and the splice
reuses it.

The walk keeps one entry per open container (object or array, its current key or index). It
reads the body a window at a time: ``bytes.split`` on the quote cuts a window into the stretches
between strings and the strings themselves in one C call, so each string costs a few steps, not a
search; a string that runs past the window (an inline payload) is jumped over with ``bytes.find``
(memchr: base64 holds no quote). Between two strings only a leading colon and the brackets
matter; what a stretch holds is looked up by its bytes (:data:`_GAPS`: chat bodies use a few dozen
distinct ones), not worked out with C calls for each. So the cost is a memchr over the payloads
plus a few steps per string and bracket, and it is linear in the body whatever it holds (a
regular expression tried at every byte outside the strings cost ~500 instructions a byte, 0.3 s
on a megabyte of digits). It is exact for valid JSON; the parse runs it before decoding, on bytes
not yet known to be JSON, so anything that cannot be JSON gives ``None`` rather than an error
(the decoder then words the client's mistake).
"""

from __future__ import annotations

from dataclasses import dataclass

import msgspec

from mmgate.request.payload import DATA_HEADER_MAX, identity_of, is_base64

_WINDOW = 1024
"""Bytes split at a time: the structure of a chat body's head, and little of a payload's start."""
_BLANKS = b" \t\r\n"  # JSON's whitespace
_FILLER = b" \t\r\n,:0123456789.+-eEtrufalsn"
"""What sits between two strings besides brackets (blanks, separators, numbers, literals)."""
_OPENING, _CLOSING = b"{[", b"}]"  # an int (a byte) in bytes: one memchr, no exception
_OPEN_OBJECT = _OPENING[0]
_BRACKETS = _OPENING + _CLOSING
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
    payloads: dict[int, str]
    """Long data URIs checked on the way (``check_payloads``): where the payload of each starts
    (after its comma) -> its identity (:func:`~mmgate.request.payload.identity_of`), for those
    whose payload is standard base64. Keyed by offset: a string the walk took for a ``url`` value
    that is none (a key after such a member) is never looked up."""


def scan_chat(body: bytes, max_tokens: int | None = None, check_payloads: bool = False) -> ChatLayout | None:
    """The layout of ``body``; ``None`` when it cannot be JSON or when the walk would take more
    than ``max_tokens`` strings and brackets (a caller's bound on its cost).

    ``check_payloads`` (the data-URI cut, which validates and hashes every payload it cuts): a
    ``url`` value that starts with ``data:`` and runs past the window is validated and hashed as
    soon as the search for its closing quote has read it, while it is in the core's cache (2 MB),
    not after the search has gone through the payloads after it (:attr:`ChatLayout.payloads`).
    Each payload is then read from memory once, not three times (~37 k fewer cache-line reads per
    three-photo body)."""
    # The innermost open container is held in locals: whether it is an object, its current key
    # (object) or the index of its current object or array element (array), and the keys it has
    # seen where a repeat is looked for. Opening a container pushes its parent's, closing pops it
    # back, so ``outer[k]`` is the container at depth k (``outer[0]``: outside the root). The
    # steps are bytecode and C calls on bytes, no Python function calls: this walk runs on every
    # large chat request. A string is classified (key or value) at the stretch after it, where
    # the colon is or is not.
    is_object = False
    key = b""
    index = -1
    keys: dict[bytes, None] | None = None
    depth = 0
    outer: list[tuple[bool, bytes, int, dict[bytes, None] | None]] = []
    ends: dict[Part, int] = {}
    urls: list[tuple[int, int]] = []
    payloads: dict[int, str] = {}
    repeated = False
    size = len(body)
    limit = size + 1 if max_tokens is None else max_tokens
    taken = 0
    string = -1  # the opening quote of the string the next gap follows, not yet classified
    end = -1  # ... its closing quote
    plain = True  # ... and whether it is known to hold no backslash
    content: bytes | None = None  # ... and what it holds, when the window held all of it
    pos = 0  # where the window starts: always outside a string
    while True:
        window = body[pos : pos + _WINDOW]
        pieces = window.split(b'"')
        last = len(pieces) - 1
        whole = pos + _WINDOW >= size  # the window reaches the end of the body
        escapes = window.find(b"\\") >= 0  # (`in` on bytes tries an int first: an exception)
        i = 0
        at = pos  # where pieces[i] starts in the body
        while True:
            gap = pieces[i]  # outside any string
            try:
                blank, colon, marks, width = _GAPS[gap]
            except KeyError:
                blank, colon, marks, width = _gap(gap)
            # The string before it is a key when a colon follows, else a value; blanks up to the
            # window's end leave that undecided yet.
            if string >= 0 and (not blank or i < last or whole):
                if is_object:
                    if colon:
                        key = body[string + 1 : end] if content is None else content
                        if not plain and key.find(b"\\") >= 0:
                            key = _unescaped(body, string, end)
                        if keys is not None:
                            if key in keys:
                                repeated = True
                            keys[key] = None
                    elif key == b"url" and body.startswith(b"data:", string + 1):
                        urls.append((string, end))
                string = -1
            for k in marks:  # the brackets' offsets in the gap, a closing one's as -1 - offset
                taken += 1
                if taken >= limit:
                    return None
                if k >= 0:  # an opening bracket
                    if not is_object:
                        index += 1  # an array's objects and arrays are counted; content parts are objects
                    outer.append((is_object, key, index, keys))
                    depth += 1
                    is_object = gap[k] == _OPEN_OBJECT
                    index = -1
                    keys = {} if is_object and depth & 1 and depth < 6 else None
                else:
                    if not depth:
                        return None
                    if is_object and depth == 5 and outer[1][1] == b"messages" and outer[3][1] == b"content":
                        ends[(outer[2][2], outer[4][2])] = at - 1 - k
                    is_object, key, index, keys = outer[-1]
                    del outer[-1]
                    depth -= 1
            if i == last:  # the window ends outside a string
                if whole:
                    if depth:
                        return None
                    return ChatLayout(body, ends, repeated, tuple(urls), payloads)
                pos += len(window)
                break
            quote = at + width
            taken += 1
            if taken >= limit:
                return None
            i += 1
            text = pieces[i]
            if escapes:
                while text[-1:] == b"\\" and i < last and _odd_run(text):  # that quote is escaped
                    i += 1
                    text += b'"' + pieces[i]
            string = quote
            content = text
            plain = not escapes  # the string holds no backslash (unknown if it runs past the window)
            if i == last:  # the string goes on past the window: memchr to its end
                plain = False
                content = None
                if whole:
                    return None  # the body ends inside it
                end = body.find(b'"', quote + 1)
                while end > 0 and body[end - 1] == 0x5C and _escaped(body, end):
                    end = body.find(b'"', end + 1)
                if end < 0:
                    return None
                if check_payloads and is_object and key == b"url" and body.startswith(b"data:", quote + 1):
                    comma = body.find(b",", quote + 1, min(end, quote + 1 + DATA_HEADER_MAX))
                    if comma > 0:
                        payload = memoryview(body)[comma + 1 : end]
                        if is_base64(payload):
                            payloads[comma + 1] = identity_of(payload)
                pos = end + 1
                break
            end = quote + 1 + len(text)
            i += 1
            at = end + 1


_GAPS: dict[bytes, tuple[bool, bool, tuple[int, ...], int]] = {}
"""What the walk needs of a stretch between two strings, by its bytes (see :func:`_gap`). A chat
body's stretches are JSON punctuation (``": "``, ``", "``, ``"}, {"``, ``": [{"``, a number here
and there): a few dozen distinct ones across all clients, so each is worked out once per process
and then costs the walk one dictionary lookup instead of three C calls, two slices and a test per
bracket (C calls are most of the walk's cost: ~1.3 k instructions each from interpreted code)."""
_GAPS_MAX = 4096  # entries; a stretch is remembered only if short (the table stays small)


def _gap(gap: bytes) -> tuple[bool, bool, tuple[int, ...], int]:
    """Whether ``gap`` is blank, whether a colon leads it (after blanks), where its brackets are
    (an opening one's offset in ``gap``, a closing one's as ``-1 - offset``), and its length."""
    lead = gap.lstrip(_BLANKS)
    rest = gap.lstrip(_FILLER)  # the brackets and what sits between them: C calls, not a byte loop
    at = len(gap) - len(rest)
    span = enumerate(rest.rstrip(_FILLER), at)
    marks = tuple(k if mark in _OPENING else -1 - k for k, mark in span if mark in _BRACKETS)
    found = (not lead, lead[:1] == b":", marks, len(gap))
    if len(gap) <= 32 and len(_GAPS) < _GAPS_MAX:
        _GAPS[gap] = found
    return found


def _odd_run(text: bytes) -> bool:
    """Whether ``text`` ends in an odd run of backslashes (the quote after it is escaped)."""
    return (len(text) - len(text.rstrip(b"\\"))) % 2 == 1


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
