"""Media payloads as sent: JSON string views, data URIs, base64 checks and content identity.

Inline media dominates body size: each payload is copied once out of the body (msgspec hands it
over as a raw view), hashed once with xxh3-128, checked in one pass and decoded only as far as its
header goes.
"""

from __future__ import annotations

from dataclasses import dataclass

import msgspec
import xxhash

from mmgate.errors import RequestError

Buffer = bytes | memoryview

_B64_ALPHABET = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
_WHITESPACE = b" \t\r\n"
_DATA_HEADER_MAX = 512  # "data:<mime>;<params>;base64," never needs more


def identity_of(payload: Buffer | str) -> str:
    """xxh3-128 hex digest of the payload as sent (base64 text, or the URL string)."""
    return xxhash.xxh3_128_hexdigest(payload.encode() if isinstance(payload, str) else payload)


def json_string(raw: msgspec.Raw, param: str) -> bytes | None:
    """The content of a JSON string held as :class:`msgspec.Raw`; ``None`` if absent or ``null``.

    This is the one copy of a payload (a memcpy, ~30 µs per MB here): scanning the copy for a
    backslash is ten times faster than a regex over the view, and the base64 check needs bytes.
    """
    view = memoryview(raw)
    if not len(view):
        return None
    if view[0] != 0x22:  # '"'
        if view.tobytes() == b"null":
            return None
        raise RequestError(f"Invalid type for '{param}': expected a string.", param=param)
    data = view[1:-1].tobytes()
    if b"\\" in data:  # JSON escapes (e.g. PHP's "\\/"): let msgspec unescape
        data = str(msgspec.json.decode(view, type=str)).encode()
    return data


@dataclass(frozen=True, slots=True)
class DataURI:
    mime: str
    payload: Buffer  # the base64 text


def parse_data_uri(value: Buffer, param: str) -> DataURI:
    """Split ``data:<mime>[;params];base64,<payload>``; only base64 data URIs are accepted."""
    comma = bytes(value[:_DATA_HEADER_MAX]).find(b",")
    if comma < 0:
        raise RequestError(f"Malformed data URI in '{param}': no ',' after the media type.", param=param)
    header = bytes(value[5:comma]).decode("ascii", "replace").split(";")
    if "base64" not in (p.strip().lower() for p in header[1:]):
        raise RequestError(f"The data URI in '{param}' must be base64-encoded (';base64,').", param=param)
    return DataURI(mime=header[0].strip().lower(), payload=value[comma + 1 :])


def check_base64(payload: Buffer, param: str) -> Buffer:
    """Refuse text that is not standard base64; return it with any line breaks removed.

    One ``bytes.translate`` pass (about 3 GB/s here) deletes every alphabet character; what is left
    must be at most two trailing ``=`` (and whitespace, which MIME-style encoders insert).
    """
    data = payload if isinstance(payload, bytes) else bytes(payload)
    rest = data.translate(None, _B64_ALPHABET)
    if rest.translate(None, b"=") and not rest.translate(None, b"=" + _WHITESPACE):
        data = data.translate(None, _WHITESPACE)  # line breaks only: strip them, check again
        rest = data.translate(None, _B64_ALPHABET)
    pads = len(rest)
    if not data or len(data) % 4 or rest.strip(b"=") or pads > 2 or (pads and not data.endswith(rest)):
        raise RequestError(f"Invalid base64 payload in '{param}'.", param=param)
    return data
