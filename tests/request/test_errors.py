"""Client mistakes become RequestError with an OpenAI message and the offending field."""

from __future__ import annotations

import orjson
import pytest

from mmgate.errors import RequestError
from mmgate.request import Api, Limits, parse_request
from support.bodies import b64, chat, data_uri, image, image_part


def error(body: bytes, headers: dict[str, str] | None = None, **kw: object) -> RequestError:
    with pytest.raises(RequestError) as info:
        parse_request(body, headers or {}, **kw)  # type: ignore[arg-type]
    return info.value


@pytest.mark.parametrize(
    ("body", "param", "words"),
    [
        (b"{", None, "not valid JSON"),
        (b"[]", None, "Expected `object`"),
        (b'{"messages": 3}', "messages", "Expected `array`"),
        (b'{"model": "m"}', "messages", "Missing required field"),
        (b'{"messages": [{"content": "x"}]}', "messages[0].role", "Missing required field"),
        (b'{"messages": [{"role": "user", "content": 5}]}', "messages[0].content", "Invalid value"),
        (b'{"messages": [], "max_tokens": "ten"}', "max_tokens", "Expected `int"),
        (b'{"messages": [], "stream": "yes"}', "stream", "Expected `bool"),
    ],
)
def test_malformed_json_and_wrong_types(body: bytes, param: str | None, words: str) -> None:
    err = error(body)
    assert err.status == 400 and err.param == param and words in err.message
    assert err.to_dict()["error"]["type"] == "invalid_request_error"


def test_invalid_base64_names_the_field() -> None:
    err = error(chat("x", image_part("data:image/png;base64,iVBO!!!!")))
    assert err.param == "messages[0].content[1].image_url.url" and "base64" in err.message


def test_base64_with_bad_padding_is_refused() -> None:
    assert (
        error(chat(image_part("data:image/png;base64,AAA"))).param == "messages[0].content[0].image_url.url"
    )
    assert "base64" in error(chat(image_part("data:image/png;base64,A=AA"))).message


def test_data_uri_must_be_base64() -> None:
    err = error(chat(image_part("data:image/svg+xml,<svg/>")))
    assert "base64" in err.message and err.param == "messages[0].content[0].image_url.url"


def test_media_type_not_accepted_for_the_part() -> None:
    err = error(chat(image_part(data_uri(b"<html/>", "text/html"))))
    assert "text/html" in err.message and "image/*" in err.message


def test_unsupported_url_scheme() -> None:
    err = error(chat(image_part("file:///etc/passwd")))
    assert "file:" in err.message and err.param == "messages[0].content[0].image_url.url"


def test_unknown_part_type() -> None:
    err = error(chat({"type": "hologram"}))
    assert err.param == "messages[0].content[0].type" and "hologram" in err.message


def test_url_must_be_a_string() -> None:
    assert (
        error(chat({"type": "image_url", "image_url": {"url": 5}})).param
        == "messages[0].content[0].image_url.url"
    )


def test_missing_payload_without_uuid() -> None:
    assert "Missing media payload" in error(chat({"type": "image_url", "image_url": {}})).message


def test_body_size_limit_is_413() -> None:
    err = error(chat("x" * 2000), limits=Limits(max_body_bytes=1000))
    assert err.status == 413 and "1000" in err.message


def test_too_many_assets() -> None:
    parts = [image_part(f"https://x/{i}.png") for i in range(5)]
    err = error(chat(*parts), limits=Limits(max_assets=4))
    assert err.param == "messages[0].content[4].image_url.url" and "at most 4" in err.message


def test_image_header_claiming_huge_dimensions_is_refused() -> None:
    png = bytearray(image("PNG", 4, 4))
    png[16:24] = (100_000).to_bytes(4, "big") * 2  # IHDR claims 100000x100000
    err = error(chat(image_part(data_uri(bytes(png)))))
    assert err.status == 400 and "100000x100000" in err.message
    assert err.param == "messages[0].content[0].image_url.url"


def test_declared_video_resolution_over_the_limit_is_refused() -> None:
    body = chat({"type": "video_url", "video_url": {"url": "https://x/v.mp4"}})
    err = error(body, {"x-llm-d-video-resolution": "100000x100000"})
    assert err.param == "x-llm-d-video-resolution" and "100000x100000" in err.message


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("x-llm-d-video-resolution", "wide"),
        ("x-llm-d-video-resolution", "0x720"),
        ("x-llm-d-video-fps", "-3"),
        ("x-llm-d-video-duration-seconds", "nan"),
        ("x-llm-d-audio-duration-seconds", "1e9"),
    ],
)
def test_malformed_media_headers(name: str, value: str) -> None:
    body = chat(
        {"type": "video_url", "video_url": {"url": "https://x/v.mp4"}},
        {"type": "audio_url", "audio_url": {"url": "https://x/a.mp3"}},
    )
    assert error(body, {name: value}).param == name


def test_completions_prompt_errors() -> None:
    assert error(b'{"model": "m"}', api=Api.COMPLETIONS).param == "prompt"
    assert error(b'{"prompt": [1, "a"]}', api=Api.COMPLETIONS).param == "prompt"
    assert error(b'{"prompt": [1.5]}', api=Api.COMPLETIONS).param == "prompt[0]"


def test_anthropic_unknown_image_source() -> None:
    body = orjson.dumps(
        {"messages": [{"role": "user", "content": [{"type": "image", "source": {"type": "carrier-pigeon"}}]}]}
    )
    assert error(body, api=Api.MESSAGES).param == "messages[0].content[0].source.type"


def test_anthropic_base64_must_be_base64() -> None:
    body = orjson.dumps(
        {
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "image",
                            "source": {"type": "base64", "media_type": "image/png", "data": "@@@@"},
                        }
                    ],
                }
            ]
        }
    )
    assert error(body, api=Api.MESSAGES).param == "messages[0].content[0].source.data"


def test_validation_can_be_switched_off_and_probing_still_copes() -> None:
    body = chat(image_part("data:image/png;base64," + b64(image("PNG", 2, 2))[:-8] + "!!!!!!!!"))
    view = parse_request(body, {}, limits=Limits(validate_base64=False))
    assert view.assets[0].width == 2  # the header is intact; the broken tail is never decoded


def test_padding_in_the_middle_of_a_large_payload_is_refused() -> None:
    text = bytearray(b64(bytes(range(256)) * 1200).encode())  # ~410 KB: validated in two chunks
    text[(1 << 18) - 1] = ord("=")  # padding at the end of the first chunk
    err = error(chat(image_part("data:image/png;base64," + text.decode())))
    assert "base64" in err.message
