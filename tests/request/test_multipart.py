"""multipart/form-data bodies split into fields as views of the body (RFC 7578 / RFC 2046)."""

from __future__ import annotations

import pytest

from mmgate.errors import RequestError
from mmgate.request.multipart import MAX_PARTS, boundary_of, parse_form
from support.bodies import form


def test_fields_and_a_file_come_back_in_order_as_views_of_the_body() -> None:
    audio = b"RIFF\x00\x01\r\n--not-the-boundary\r\nWAVE" + bytes(range(256))
    body = form(("model", "whisper-1"), ("file", ("a b.wav", audio, "audio/wav")), ("stream", "true"))
    parts = parse_form(body, "multipart/form-data; boundary=mmgate-test-7MA4YWxk")
    assert [(p.name, p.filename, p.content_type) for p in parts] == [
        ("model", None, None),
        ("file", "a b.wav", "audio/wav"),
        ("stream", None, None),
    ]
    assert parts[0].text() == "whisper-1" and parts[2].text() == "true"
    assert bytes(parts[1].data) == audio
    assert parts[1].data.obj is body  # not a copy


def test_a_preamble_an_epilogue_quoted_parameters_and_an_empty_field() -> None:
    body = (
        b"ignored preamble\r\n--b0\r\n"
        b'Content-Disposition: form-data; name="prompt"; filename="x;y \\"z\\".txt"\r\n\r\n'
        b"\r\n--b0\r\nContent-Disposition: FORM-DATA; NAME=language\r\n\r\nen\r\n--b0--\r\nepilogue"
    )
    parts = parse_form(body, 'Multipart/Form-Data; charset=utf-8; boundary="b0"')
    assert [(p.name, p.filename, bytes(p.data)) for p in parts] == [
        ("prompt", 'x;y "z".txt', b""),
        ("language", None, b"en"),
    ]


@pytest.mark.parametrize(
    ("content_type", "fragment"),
    [
        (None, "got Content-Type none"),
        ("application/json", "multipart/form-data body"),
        ("multipart/form-data", "boundary of 1 to 70"),
        ("multipart/form-data; boundary=" + "x" * 71, "boundary of 1 to 70"),
    ],
)
def test_a_content_type_without_a_usable_boundary_is_a_400_naming_it(
    content_type: str | None, fragment: str
) -> None:
    with pytest.raises(RequestError) as caught:
        boundary_of(content_type)
    assert caught.value.status == 400 and caught.value.param == "Content-Type"
    assert fragment in str(caught.value)


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        (b"no boundary anywhere", "never appears"),
        (b"--b\r\nContent-Disposition: form-data; name=a\r\n\r\nunfinished", "before the closing boundary"),
        (b"--b\r\nContent-Disposition: attachment\r\n\r\nx\r\n--b--", "form-data; name"),
        (b"--b\r\nno colon here\r\n\r\nx\r\n--b--", "no colon"),
        (b"--bjunk\r\n\r\nx\r\n--b--", "not followed by a line break"),
        (b"--b\r\nContent-Disposition: form-data; name=a\r\n" + b"x" * 9000, "do not end within"),
    ],
)
def test_malformed_bodies_are_400s_naming_the_body(body: bytes, fragment: str) -> None:
    with pytest.raises(RequestError) as caught:
        parse_form(body, "multipart/form-data; boundary=b")
    assert caught.value.status == 400 and caught.value.param == "body"
    assert fragment in str(caught.value)


def test_more_fields_than_the_limit_are_refused() -> None:
    body = form(*[(f"f{i}", "v") for i in range(MAX_PARTS + 1)])
    with pytest.raises(RequestError, match="Too many form fields"):
        parse_form(body, "multipart/form-data; boundary=mmgate-test-7MA4YWxk")
