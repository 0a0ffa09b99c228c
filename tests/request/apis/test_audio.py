"""parse_request on audio uploads (transcriptions, translations): one audio asset, its duration."""

from __future__ import annotations

import pytest

from mmgate.errors import RequestError
from mmgate.request import Api, Limits, Modality, Source, parse_request
from support import media
from support.apis import refused
from support.bodies import form, form_headers


@pytest.mark.parametrize("api", [Api.TRANSCRIPTIONS, Api.TRANSLATIONS])
def test_an_uploaded_wav_is_one_audio_asset_with_its_duration_from_its_header(api: Api) -> None:
    audio = media.wav(seconds=45.0)
    body = form(
        ("model", "whisper"),
        ("prompt", "Names: Ada."),
        ("file", ("talk.wav", audio, "audio/wav")),
        ("stream", "true"),
        ("language", "en"),
    )
    view = parse_request(body, form_headers(), api=api)
    (asset,) = view.assets
    assert (view.api, view.model, view.stream, view.parts[0]) == (api, "whisper", True, "Names: Ada.")
    assert (asset.modality, asset.source, asset.detected_format, asset.duration_s) == (
        Modality.AUDIO,
        Source.INLINE,
        "wav",
        45.0,
    )
    assert (asset.field, asset.mime, asset.payload_size, asset.probed) == (
        "file",
        "audio/wav",
        len(audio),
        True,
    )
    assert view.extra["language"] == "en" and view.body is body


def test_an_upload_without_a_duration_in_its_header_takes_the_llm_d_header() -> None:
    body = form(("model", "whisper"), ("file", ("x.bin", b"\x00" * 64, "application/octet-stream")))
    headers = {**form_headers(), "x-llm-d-audio-duration-seconds": "12"}
    # Bytes with no known header are refused by default (mmgate.validation.mediaContent); with
    # the check off, such an upload is unprobed and the header supplies its duration.
    with pytest.raises(RequestError) as err:
        parse_request(body, headers, api=Api.TRANSCRIPTIONS)
    assert err.value.param == "file" and err.value.code == "invalid_media"
    view = parse_request(body, headers, api=Api.TRANSCRIPTIONS, limits=Limits(check_media_content=False))
    assert view.assets[0].duration_s == 12.0 and view.stream is False


@pytest.mark.parametrize(
    ("body", "headers", "param"),
    [
        (form(("model", "whisper")), form_headers(), "file"),
        (form(("file", ("a.wav", b"", "audio/wav"))), form_headers(), "file"),
        (form(("file", ("a.wav", media.wav(), "audio/wav")), ("stream", "maybe")), form_headers(), "stream"),
        (form(("model", "w")), {"content-type": "application/json"}, "Content-Type"),
        (b"--x\r\nbroken", form_headers(), "body"),
    ],
)
def test_audio_upload_mistakes_are_400s_naming_the_field(
    body: bytes, headers: dict[str, str], param: str
) -> None:
    assert refused(Api.TRANSCRIPTIONS, body, headers).param == param
