"""Media payloads as sent: JSON string views, data URIs, base64 checks and content identity.

Inline media dominates body size, so the fast path copies nothing: msgspec hands a payload over as
a :class:`msgspec.Raw` view into the body, the view is hashed once with xxh3-128, validated by
pybase64 (SIMD) in bounded chunks, and decoded only as far as its header goes. Only payloads with
JSON escapes (``\\/``) or MIME line breaks take a slower, copying path.
"""

from __future__ import annotations

import binascii

import msgspec
import pybase64
import xxhash

from mmgate.errors import RequestError

Buffer = bytes | memoryview

_WHITESPACE = b" \t\r\n"
DATA_HEADER_MAX = 512  # "data:<mime>;<params>;base64," never needs more
_CHUNK = 1 << 18  # base64 characters validated per pybase64 call (a multiple of 4): bounded memory


def identity_of(payload: Buffer | str) -> str:
    """xxh3-128 hex digest of the payload as sent (base64 text, or the URL string)."""
    return xxhash.xxh3_128_hexdigest(payload.encode() if isinstance(payload, str) else payload)


def json_string(raw: msgspec.Raw, param: str) -> memoryview | None:
    """The content of a JSON string held as :class:`msgspec.Raw`, as a view (escapes kept).

    ``None`` for an absent value or ``null``; anything else that is not a string is a client error.
    Callers that need the exact text of a short value use :func:`unescape`.
    """
    view = memoryview(raw)
    if not len(view):
        return None
    if view[0] != 0x22:  # '"'
        if view.tobytes() == b"null":
            return None
        raise RequestError(f"Invalid type for '{param}': expected a string.", param=param)
    return view[1:-1]


def unescape(text: Buffer) -> bytes:
    """The UTF-8 bytes of JSON string content that may hold escapes (``\\/``, ``\\n``, ...)."""
    data = bytes(text)
    if b"\\" not in data:
        return data
    try:
        return str(msgspec.json.decode(b'"' + data + b'"', type=str)).encode()
    except msgspec.DecodeError:  # only reachable if a caller skipped the JSON decode of this text
        raise RequestError("Malformed JSON string escape in a media value.") from None


class DataURI:
    """A data URI split: its media type and its payload.

    A plain class with slots rather than a NamedTuple: this module is compiled by mypyc
    (:mod:`mmgate.compiled`), which makes such a class a native one with typed attributes.
    """

    __slots__ = ("mime", "payload")

    def __init__(self, mime: str, payload: memoryview) -> None:
        self.mime = mime
        self.payload = payload  # the base64 text, still JSON-escaped if the client escaped it


def parse_data_uri(value: memoryview, param: str) -> DataURI:
    """Split ``data:<mime>[;params];base64,<payload>``; only base64 data URIs are accepted."""
    head = bytes(value[:DATA_HEADER_MAX])
    comma = head.find(b",")
    if comma < 0:
        raise RequestError(f"Malformed data URI in '{param}': no ',' after the media type.", param=param)
    meta = head[5:comma]
    escaped = meta.find(b"\\") >= 0  # (`in` on bytes tries an int first: an exception raised and cleared)
    header = (unescape(meta) if escaped else meta).decode("utf-8", "replace").split(";")
    params = header[1:]
    if params != ["base64"] and "base64" not in (p.strip().lower() for p in params):
        raise RequestError(f"The data URI in '{param}' must be base64-encoded (';base64,').", param=param)
    return DataURI(header[0].strip().lower(), value[comma + 1 :])


def is_base64(text: Buffer) -> bool:
    """Standard base64 with padding: pybase64 validates chunk by chunk (``=`` only at the end)."""
    view = memoryview(text)
    if not len(view) or len(view) % 4:
        return False
    try:
        for start in range(0, len(view), _CHUNK):
            chunk = view[start : start + _CHUNK]
            if start + _CHUNK < len(view) and chunk[-1] == 0x3D:  # padding before the end
                return False
            pybase64.b64decode(chunk, validate=True)
    except (binascii.Error, ValueError):
        return False
    return True


def check_base64(payload: memoryview, param: str) -> Buffer:
    """Refuse text that is not standard base64; return it (unescaped, line breaks removed if needed).

    The common case returns the same view untouched. A JSON-escaped payload (``\\/`` from PHP's
    encoder) or MIME-style line breaks are normalised once, on a copy.
    """
    if is_base64(payload):
        return payload
    data = unescape(payload).translate(None, _WHITESPACE)
    if is_base64(data):
        return data
    raise RequestError(f"Invalid base64 payload in '{param}'.", param=param)
