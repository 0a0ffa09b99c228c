"""Decoding request bodies into :mod:`~mmgate.request.bodies` under strict JSON rules, with
client errors worded by field; chat bodies without making the JSON decoder walk their inline media.

msgspec must scan every byte of a JSON string to find where it ends, even for a field kept as
:class:`msgspec.Raw`: on the three-image benchmark body (2.36 MB) that scan is ~0.55 ms, about
half of :func:`~mmgate.request.parse_request`. But a base64 data URI holds no quote and no
backslash, so ``bytes.find`` (memchr speed, ~20x faster) finds its end. :func:`decode_chat` cuts
every ``"url": "data:..."`` value out of the body, decodes the few kilobytes left, and puts views
of the original bytes back into the decoded ``url`` fields. Nothing is copied.

The cut must never change what is accepted. A value is cut only when it is provably a valid JSON
string with no escapes: it is the value of an object member ``url`` (the body's structural walk,
:mod:`mmgate.request.layout`, says where), it starts with ``data:``, the text up to the
first comma (the media type and parameters) is checked exactly (no backslash, no control
character, valid UTF-8), and everything after the comma is in the base64 alphabet (pybase64's SIMD
validator, the check every inline payload gets; a cut one is not checked again). Any other value is
left to the decoder, which scans it as usual. Each cut payload is also hashed for its identity right
there, with its validation: a payload is read from memory once (by the walk's search for its end)
and then twice more from the core's cache, not three times from memory (the walk does both for a
payload longer than its window: :attr:`~mmgate.request.layout.ChatLayout.payloads`).

Replacing a valid string by another valid string leaves the JSON structure, and so every decode
error, unchanged; on a decode error the whole body is decoded again so the message carries the
client's own byte offsets. If the client's text already holds the placeholder, nothing is cut.

Both paths then apply the JSON rules msgspec leaves out for values it skips or keeps raw: the body
must be valid UTF-8 (RFC 8259, and what orjson and vLLM's own parser require), and nesting too deep
for the decoder is a client error, not a ``RecursionError``.
"""

from __future__ import annotations

import re
from typing import Any, ClassVar, TypeVar

import msgspec

from mmgate.errors import RequestError
from mmgate.request import bodies
from mmgate.request.layout import ChatLayout, scan_chat
from mmgate.request.payload import DATA_HEADER_MAX, identity_of, is_base64

MIN_BODY = 64 * 1024
"""Smaller bodies are decoded directly: the scan would not pay for itself."""

MAX_TOKENS = 1024
"""Bodies whose walk takes more JSON tokens than this (long text, not media) are not cut: a step
of the walk costs far more than the decoder's scan of the bytes it would save."""
_PLACEHOLDER = b"\\u0000mmgate-cut:"
_HEADER_BAD = re.compile(rb"[\x00-\x1f\\]")  # what a JSON string cannot hold unescaped ('"' ends it)


class CutMediaRef(bodies.MediaRef, dict=True):
    """A media reference whose data URI was cut and restored: its payload after the comma is
    already known to be standard base64, so the parser need not validate it a second time, and
    ``identity`` (an attribute, not a field: re-encoding the body never shows it) is the payload's
    :func:`~mmgate.request.payload.identity_of`.

    The cut hashes each payload right after validating it: the ~0.8 MB of a photo are then still in
    the core's cache (2 MB), where the parser, which reaches the part after every payload of the
    body has been read, would read it from memory again (xxh3 ~7 µs hot against ~10 µs per photo)."""

    identity: ClassVar[str] = ""  # each instance's own, in its __dict__ (see restored)

    @classmethod
    def restored(cls, fields: dict[str, Any], identity: str) -> CutMediaRef:
        """The reference with ``fields`` and its payload's identity."""
        ref = cls(**fields)
        vars(ref)["identity"] = identity  # an instance attribute: not a field, never encoded
        return ref


def _plain_json_string(body: bytes, start: int, end: int, checked: dict[int, str]) -> str | None:
    """The payload's identity when ``body[start:end]`` (quote-free) is certainly a valid JSON
    string's content, else ``None``.

    A sufficient test, not a necessary one: None sends the value to the decoder, which is always
    right. The header is tested exactly; the payload must be standard base64 (the check
    :func:`~mmgate.request.payload.check_base64` makes), whose alphabet is printable ASCII.
    ``checked`` holds the payloads the walk validated and hashed already
    (:attr:`~mmgate.request.layout.ChatLayout.payloads`); the others are validated and hashed here,
    right after one another, while the payload is in cache.
    """
    comma = body.find(b",", start, min(end, start + DATA_HEADER_MAX))
    if comma < 0:
        return None
    header = body[start:comma]
    if _HEADER_BAD.search(header) or not _utf8(header):
        return None
    identity = checked.get(comma + 1)
    if identity is not None:
        return identity
    payload = memoryview(body)[comma + 1 : end]
    return identity_of(payload) if is_base64(payload) else None


def _utf8(data: bytes) -> bool:
    if data.isascii():
        return True
    try:
        data.decode()
    except UnicodeDecodeError:
        return False
    return True


Cut = tuple[int, int, str]
"""A cut value: the offsets of its quotes and its payload's identity."""


def cut_data_urls(body: bytes, layout: ChatLayout | None = None) -> tuple[bytes, list[Cut]] | None:
    """The body with each data-URI ``url`` value replaced by a short placeholder string, and the
    cut values as ``(start, end, identity)``, in order. None when nothing was cut.

    The values come from the body's :class:`~mmgate.request.layout.ChatLayout` (``layout``, or
    a walk bounded by ``MAX_TOKENS``: a body with more tokens than that, long text rather than
    media, is left to the decoder). Only a value that passes :func:`_plain_json_string` is cut.
    """
    if len(body) < MIN_BODY:
        return None
    if layout is None:
        layout = scan_chat(body, MAX_TOKENS, check_payloads=True)
    if layout is None:
        return None
    view = memoryview(body)
    pieces: list[bytes | memoryview] = []
    cuts: list[Cut] = []
    kept = 0
    for at, end in layout.data_urls:
        identity = _plain_json_string(body, at + 1, end, layout.payloads)
        if identity is not None:
            pieces.append(view[kept:at])
            pieces.append(b'"' + _PLACEHOLDER + str(len(cuts)).encode() + b'"')
            cuts.append((at, end, identity))
            kept = end + 1
    if not cuts:
        return None
    pieces.append(view[kept:])
    cut_body = b"".join(pieces)
    if cut_body.count(_PLACEHOLDER) != len(cuts):  # the client's own text holds the placeholder
        return None
    return cut_body, cuts


def decode_chat(body: bytes) -> tuple[bodies.ChatBody, ChatLayout | None]:
    """``bodies.CHAT.decode(body)`` under strict JSON rules, skipping the scan of inline data URIs
    when it can; and the body's layout when it was walked for that (bodies of ``MIN_BODY`` bytes
    or more, up to ``MAX_TOKENS``), for the steps after the parse that need offsets.

    Raises msgspec's error for malformed JSON or a schema mismatch, exactly as the full decode
    would, and :class:`RequestError` for invalid UTF-8 or nesting too deep.
    """
    layout = scan_chat(body, MAX_TOKENS, check_payloads=True) if len(body) >= MIN_BODY else None
    cut = cut_data_urls(body, layout) if layout is not None else None
    if cut is None:
        decoded = _decode(body)
        if not body.isascii():  # the common case costs one C call, not a function
            require_utf8(body)
        return decoded, layout
    cut_body, cuts = cut
    try:
        decoded = _decode(cut_body)
    except msgspec.MsgspecError:
        return _decode(body), None  # raises the same error, with the client's own offsets
    require_utf8(body, checked=cut_body)  # the cut values are ASCII-clean already
    marker = b'"' + _PLACEHOLDER
    for message in decoded.messages:
        if not isinstance(message.content, list):
            continue
        for part in message.content:
            for ref in (part.image_url, part.video_url, part.audio_url):
                if not isinstance(ref, bodies.MediaRef):
                    continue
                url = memoryview(ref.url)
                if url[: len(marker)] == marker:
                    start, end, identity = cuts[int(bytes(url[len(marker) : -1]))]
                    fields = msgspec.structs.asdict(ref)  # every field, should MediaRef grow
                    fields["url"] = msgspec.Raw(memoryview(body)[start : end + 1])
                    restored = CutMediaRef.restored(fields, identity)
                    if ref is part.image_url:
                        part.image_url = restored
                    elif ref is part.video_url:
                        part.video_url = restored
                    else:
                        part.audio_url = restored
    return decoded, layout


TOO_DEEP = "The request body is not valid JSON (nested too deeply)."
T = TypeVar("T")
_MISSING = re.compile(r"Object missing required field `([^`]+)`")


def _decode(data: bytes) -> bodies.ChatBody:
    try:
        return bodies.CHAT.decode(data)
    except RecursionError:
        raise RequestError(TOO_DEEP) from None


def decode_body(decoder: msgspec.json.Decoder[T], data: bytes, prefix: str = "") -> T:
    """``decoder.decode(data)`` with every failure a :class:`RequestError` naming the field.

    ``prefix`` is the JSON path of ``data`` inside the request body when it is a nested value
    decoded on its own (a completions ``prompt``), so the error names the client's field.
    """
    try:
        return decoder.decode(data)
    except RecursionError:
        raise RequestError(TOO_DEEP) from None
    except msgspec.ValidationError as exc:
        raise _validation_error(str(exc), prefix) from None
    except msgspec.DecodeError as exc:
        raise RequestError(f"The request body is not valid JSON ({exc}).") from None


def _validation_error(text: str, prefix: str) -> RequestError:
    message, _, where = text.partition(" - at `")
    path = where.rstrip("`").removeprefix("$")
    param = (prefix + path) if prefix else path.removeprefix(".")
    missing = _MISSING.fullmatch(message)
    if missing:
        param = f"{param}.{missing.group(1)}" if param else missing.group(1)
        return RequestError(f"Missing required field '{param}'.", param=param)
    if not param:
        return RequestError(f"Invalid request body: {message}.")
    return RequestError(f"Invalid value for '{param}': {message}.", param=param)


def require_utf8(body: bytes, *, checked: bytes | None = None) -> None:
    """Refuse a body that is not UTF-8 (msgspec checks only the strings it decodes).

    ``checked`` is what to test when it is cheaper than the body and equivalent (the cut body);
    the message always carries the offset in ``body``, so both paths word the error the same.
    """
    if _utf8(body if checked is None else checked):
        return
    try:
        body.decode()
    except UnicodeDecodeError as exc:
        raise RequestError(
            f"The request body is not valid JSON (invalid UTF-8 at byte {exc.start})."
        ) from None
