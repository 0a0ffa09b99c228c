"""Property tests: the data-URI cut (large chat bodies) accepts and refuses exactly what the plain
decode does, with the same result or the same error, and refuses whatever orjson refuses.

Bodies are generated with the shapes the cut looks for (``"url": "data:..."`` values in media
parts, in unknown objects, twice in one object, with odd whitespace, media types, parameters and
payload alphabets), then optionally corrupted where it matters most: inside and around the data
URIs' headers and payloads (control characters, quotes, backslashes, broken UTF-8).
"""

from __future__ import annotations

import base64
import json
import os
import random
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import msgspec
import orjson
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from mmgate.errors import RequestError
from mmgate.request import Api, decode, parse_request
from mmgate.request.decode import MIN_BODY, cut_data_urls, decode_chat

_EXAMPLES = int(os.environ.get("MMGATE_FUZZ_EXAMPLES", "150"))
PROPERTY = settings(
    max_examples=_EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@contextmanager
def _uncut() -> Iterator[None]:
    """Run the small-body path (the plain decode) on a body of any size."""
    saved = decode.MIN_BODY
    decode.MIN_BODY = 1 << 62
    try:
        yield
    finally:
        decode.MIN_BODY = saved


def _outcome(data: bytes) -> tuple[str, Any]:
    """What decode_chat does with a body: the decoded skeleton (media as raw bytes), or the error."""
    try:
        return "ok", msgspec.json.encode(decode_chat(data)[0])
    except (msgspec.MsgspecError, RequestError) as exc:
        return type(exc).__name__, str(exc)


def _parsed(data: bytes) -> tuple[str, Any]:
    """What a client sees from parse_request: the prompt parts, or the error's status, message and field."""
    try:
        view = parse_request(data, {})
    except RequestError as exc:
        return "error", (exc.status, str(exc), exc.param)
    return "ok", view.parts


def _orjson_accepts(data: bytes) -> bool:
    try:
        orjson.loads(data)
    except orjson.JSONDecodeError:
        return False
    return True


def assert_same_on_both_paths(data: bytes) -> tuple[str, Any]:
    with _uncut():
        plain, plain_view = _outcome(data), _parsed(data)
    cut, cut_view = _outcome(data), _parsed(data)
    assert cut == plain
    assert cut_view == plain_view
    if not _orjson_accepts(data):
        assert cut[0] != "ok", "a body orjson refuses was accepted"
    return cut


# --- generated bodies ----------------------------------------------------------------------------

_MEDIA_TYPES = [
    "image/jpeg",
    "image/png",
    "IMAGE/PNG",
    " image/png ",
    "",
    "image/png;name=ph\u00f6to.png",  # non-ASCII in the header
    "image/png;charset=\u65e5\u672c",
    "video/mp4",
    "audio/wav",
    "text/plain;charset=utf-8",
]
_SEPARATORS = [b":", b": ", b" : ", b":\t", b":\n  ", b":\r\n", b" :" + b" " * 40]


@st.composite
def _payload(draw: st.DrawFn, big: bool) -> bytes:
    """A data-URI payload as JSON string text: mostly standard base64, sometimes not."""
    size = draw(st.sampled_from([MIN_BODY, MIN_BODY + 1, MIN_BODY + 2])) if big else draw(st.integers(0, 40))
    raw = random.Random(draw(st.integers(0, 2**16))).randbytes(size)
    text = base64.b64encode(raw)
    variant = draw(
        st.sampled_from(["standard"] * 15 + ["unpadded", "pad-inside", "urlsafe", "escaped", "percent"])
    )
    if variant == "unpadded":
        text = text.rstrip(b"=")
    elif variant == "pad-inside":
        text = b"AA==" + text
    elif variant == "urlsafe":
        text = base64.urlsafe_b64encode(raw)
    elif variant == "escaped":
        text = text.replace(b"/", b"\\/")
    elif variant == "percent":
        text = text[: len(text) // 2] + b"%20" + text[len(text) // 2 :]
    return text


@st.composite
def _data_uri(draw: st.DrawFn, big: bool) -> bytes:
    """``"data:..."`` as it appears in the body (quoted, JSON text)."""
    media = json.dumps(draw(st.sampled_from(_MEDIA_TYPES)), ensure_ascii=draw(st.booleans()))[1:-1].encode()
    marker = draw(st.sampled_from([b";base64,"] * 5 + [b",", b";BASE64,", b";base64"]))
    return b'"data:' + media + marker + draw(_payload(big)) + b'"'


def _obj(pairs: list[tuple[bytes, bytes]], sep: bytes) -> bytes:
    return b"{" + b", ".join(json.dumps(k.decode()).encode() + sep + v for k, v in pairs) + b"}"


@st.composite
def _part(draw: st.DrawFn, sep: bytes, big: bool) -> bytes:
    kind = draw(
        st.sampled_from(["text", "image", "image", "video", "audio", "simple", "input_audio", "junk"])
    )
    if kind == "text":
        text = draw(
            st.sampled_from(["look", 'say "url": "data:x"', "data:image/png;base64,AAAA", "\u00e9t\u00e9"])
        )
        return _obj([(b"type", b'"text"'), (b"text", json.dumps(text).encode())], sep)
    if kind == "simple":  # {"image_url": "data:..."}: the key is not "url", never cut
        return _obj([(b"image_url", draw(_data_uri(big)))], sep)
    if kind == "input_audio":
        return _obj(
            [(b"type", b'"input_audio"'), (b"input_audio", _obj([(b"data", b'"UklGRg=="')], sep))], sep
        )
    if kind == "junk":  # a url data URI where nothing reads it
        return _obj(
            [(b"type", b'"text"'), (b"text", b'"x"'), (b"meta", _obj([(b"url", draw(_data_uri(big)))], sep))],
            sep,
        )
    field = {"image": b"image_url", "video": b"video_url", "audio": b"audio_url"}[kind]
    ref = [(b"url", draw(_data_uri(big)))]
    if draw(st.integers(0, 4)) == 0:  # a duplicate key: the last one wins on both paths
        ref.append((b"url", draw(_data_uri(False))))
    if draw(st.booleans()):
        ref.append((b"detail", b'"low"'))
    return _obj([(b"type", b'"' + field + b'"'), (field, _obj(ref, sep))], sep)


@st.composite
def chat_bodies(draw: st.DrawFn) -> bytes:
    """A chat body, usually over MIN_BODY (one big payload among the parts)."""
    sep = draw(st.sampled_from(_SEPARATORS))
    count = draw(st.integers(1, 4))
    small = draw(st.sampled_from([False] * 5 + [True]))  # sometimes no big payload: the body stays small
    big_at = draw(st.integers(0, count - 1))
    parts = [draw(_part(sep, big=i == big_at and not small)) for i in range(count)]
    if not small and draw(
        st.sampled_from([True, True, True, False])
    ):  # usually the big payload is in a url (a cut candidate)
        kind = draw(st.sampled_from(["image_url", "video_url", "audio_url"]))
        ref = _obj([(b"url", draw(_data_uri(True)))], sep)
        parts[big_at] = _obj([(b"type", json.dumps(kind).encode()), (kind.encode(), ref)], sep)
    message = _obj([(b"role", b'"user"'), (b"content", b"[" + b",".join(parts) + b"]")], sep)
    pairs = [(b"model", b'"m"'), (b"messages", b"[" + message + b"]")]
    if draw(st.booleans()):
        pairs.insert(0, (b"metadata", b'{"nested": [[{"url": "data:,x"}]], "n": [1, 2.5e3, -0, null, true]}'))
    return _obj(pairs, sep)


_NASTY = [
    b"\x00",
    b"\x01",
    b"\n",
    b"\t",
    b"\x1f",
    b"\x7f",
    b"\\",
    b'"',
    b'\\"',
    b"\\n",
    b"\\u00e9",
    b"\\ud800",
    b"\xff",
    b"\xc3",
    b"\xed\xa0\x80",
    b"\xc3\xa9",
    b"\xf0\x9f\x98\x80",
    b" ",
    b",",
    b"{",
    b"}",
    b"=",
    b"\\u0000mmgate-cut:0",
]


@st.composite
def corrupted(draw: st.DrawFn) -> bytes:
    """A generated body with a few bytes inserted, replaced or deleted, mostly near data URIs."""
    data = bytearray(draw(chat_bodies()))
    hot = [i for i in range(len(data)) if data.startswith(b"data:", i)] or [0]
    for _ in range(draw(st.integers(1, 3))):
        near = draw(st.sampled_from(hot))
        where = draw(
            st.integers(near - 12, near + 60)  # the key, the header, the first payload bytes
            | st.integers(0, len(data))
            | st.integers(len(data) - 40, len(data))
        )
        where = min(max(where, 0), len(data))
        action = draw(st.sampled_from(["insert", "replace", "delete"]))
        nasty = draw(st.sampled_from(_NASTY))
        if action == "insert":
            data[where:where] = nasty
        elif action == "replace":
            data[where : where + len(nasty)] = nasty
        else:
            del data[where : where + draw(st.integers(1, 3))]
    return bytes(data)


@PROPERTY
@given(data=chat_bodies())
def test_generated_bodies_decode_the_same_with_and_without_the_cut(data: bytes) -> None:
    event("cut" if cut_data_urls(data) else "not cut")  # --hypothesis-show-statistics: about half
    assert_same_on_both_paths(data)


@PROPERTY
@given(data=corrupted())
def test_corrupted_bodies_are_refused_or_accepted_the_same_with_and_without_the_cut(data: bytes) -> None:
    event("cut" if cut_data_urls(data) else "not cut")
    assert_same_on_both_paths(data)


# --- the cases that used to slip through, spelled out ---------------------------------------------

_PAYLOAD = base64.b64encode(random.Random(3).randbytes(MIN_BODY)).decode()


def _body(url: bytes, *, key: bytes = b'"url": ') -> bytes:
    return (
        b'{"model": "m", "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {'
        + key
        + b'"'
        + url
        + b'"}}]}]}'
    )


@pytest.mark.parametrize(
    "header",
    [
        b"data:image/jpeg\x01;base64,",  # a control character
        b"data:image/jpeg\n;base64,",
        b"data:image/\xffjpeg;base64,",  # not UTF-8
        b"data:image/\xed\xa0\x80;base64,",  # an encoded surrogate
        b"data:image/jpeg;base64,\x00",  # a control character first in the payload
    ],
)
def test_a_broken_data_uri_header_is_a_400_as_for_small_bodies(header: bytes) -> None:
    large = _body(header + _PAYLOAD.encode())
    small = _body(header + b"/9j/4AAQ")
    assert len(large) > MIN_BODY > len(small)
    assert not _orjson_accepts(large)
    for data in (large, small):
        with pytest.raises(RequestError) as error:
            parse_request(data, {})
        assert error.value.status == 400 and "not valid JSON" in str(error.value)
    assert_same_on_both_paths(large)


def test_a_control_character_or_line_break_inside_a_large_payload_is_a_400() -> None:
    for bad in (b"\n", b"\r\n", b"\x00", b"\x7f\x80"):
        data = _body(b"data:image/jpeg;base64," + _PAYLOAD[:4000].encode() + bad + _PAYLOAD[4000:].encode())
        assert not _orjson_accepts(data)
        with pytest.raises(RequestError, match="not valid JSON"):
            parse_request(data, {})


def test_invalid_utf8_anywhere_is_a_400_on_both_paths_with_the_same_offset() -> None:
    large = _body(b"data:image/jpeg;base64," + _PAYLOAD.encode())
    value = large.replace(b'"model"', b'"x": "\xc3(", "model"')  # in fields nothing reads:
    key = large.replace(b'"model"', b'"k\xff": 1, "model"')  # msgspec alone would skip them
    for data in (value, key):
        with pytest.raises(RequestError, match=r"invalid UTF-8 at byte \d+") as cut:
            decode_chat(data)
        with _uncut(), pytest.raises(RequestError) as plain:
            decode_chat(data)
        assert str(cut.value) == str(plain.value)


def test_valid_non_ascii_headers_and_plain_bodies_are_still_cut() -> None:
    data = _body("data:image/png;name=ph\u00f6to;base64,".encode() + _PAYLOAD.encode())
    cut = cut_data_urls(data)
    assert cut is not None and len(cut[1]) == 1
    assert assert_same_on_both_paths(data)[0] == "ok"


def test_nesting_too_deep_is_a_400_not_a_crash() -> None:
    deep = b"[" * 100_000 + b"]" * 100_000
    for data in (
        b'{"messages": [], "x": ' + deep + b"}",
        _body(b"data:image/jpeg;base64," + _PAYLOAD.encode()).replace(
            b'"model"', b'"x": ' + deep + b', "model"'
        ),
    ):
        with pytest.raises(RequestError, match="nested too deeply"):
            parse_request(data, {})


@pytest.mark.parametrize("api", [Api.COMPLETIONS, Api.MESSAGES])
def test_the_same_json_rules_hold_for_completions_and_messages_bodies(api: Api) -> None:
    deep = b'{"prompt": "x", "messages": [], "x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    with pytest.raises(RequestError, match="nested too deeply"):
        parse_request(deep, {}, api=api)
    broken = b'{"prompt": "x", "messages": [], "x": "\xc3("}'
    with pytest.raises(RequestError, match="invalid UTF-8 at byte 38"):
        parse_request(broken, {}, api=api)
