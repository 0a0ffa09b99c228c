"""parse_request on the three APIs: parts in order, assets, identities, headers."""

from __future__ import annotations

import base64

import orjson
import pytest
import xxhash

from mmgate.errors import RequestError
from mmgate.request import Api, Limits, MediaAsset, Modality, Source, parse_request, role_header
from support import media
from support.bodies import b64, chat, data_uri, image, image_part


def test_text_only_chat_renders_roles_in_order() -> None:
    body = orjson.dumps(
        {
            "model": "m",
            "messages": [
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": "Hi"},
            ],
            "max_tokens": 7,
            "stream": True,
            "cache_salt": "s1",
        }
    )
    view = parse_request(body, {})
    assert view.parts == [f"{role_header('system')}Be brief.\n{role_header('user')}Hi\n"]
    assert (view.model, view.stream, view.max_tokens, view.cache_salt) == ("m", True, 7, "s1")
    assert view.body is body and view.assets == [] and view.unprobed_assets == 0


def test_max_completion_tokens_wins_over_max_tokens() -> None:
    view = parse_request(chat("x", max_tokens=5, max_completion_tokens=9), {})
    assert view.max_tokens == 9


def test_string_and_part_list_content_render_the_same() -> None:
    as_string = orjson.dumps({"messages": [{"role": "user", "content": "ab"}]})
    as_parts = orjson.dumps(
        {"messages": [{"role": "user", "content": [{"type": "text", "text": "a"}, {"text": "b"}]}]}
    )
    assert parse_request(as_string, {}).parts == parse_request(as_parts, {}).parts


def test_media_stands_where_it_was_sent() -> None:
    png = image("PNG", 64, 32)
    view = parse_request(chat("before", image_part(data_uri(png)), "after"), {})
    first, asset, last = view.parts
    assert first == role_header("user") + "before"
    assert isinstance(asset, MediaAsset) and last == "after\n"
    assert asset.modality is Modality.IMAGE and asset.source is Source.INLINE
    assert (asset.width, asset.height, asset.detected_format, asset.probed) == (64, 32, "png", True)
    assert asset.field == "messages[0].content[1].image_url.url"
    assert asset.identity == xxhash.xxh3_128_hexdigest(b64(png).encode())


def test_equal_prefixes_give_equal_part_sequences() -> None:
    png = data_uri(image("PNG", 8, 8))
    one = parse_request(chat("look", image_part(png), "what is it?"), {})
    two = parse_request(chat("look", image_part(png), "who made it?"), {})
    assert one.parts[:2] == two.parts[:2] and one.parts[2] != two.parts[2]


def test_repeated_asset_is_recognised_and_probed_once() -> None:
    png = data_uri(image("PNG", 10, 20))
    view = parse_request(chat(image_part(png), "and again", {"image_url": png}), {})
    a, b = view.assets
    assert a.identity == b.identity and a.field != b.field
    assert (b.width, b.height, b.probed) == (10, 20, True)


def test_same_bytes_same_identity_across_data_uri_and_anthropic_base64() -> None:
    png = image("PNG", 5, 5)
    openai = parse_request(chat(image_part(data_uri(png))), {}).assets[0]
    anthropic_body = orjson.dumps(
        {
            "model": "claude",
            "max_tokens": 10,
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "image",
                            "source": {"type": "base64", "media_type": "image/png", "data": b64(png)},
                        }
                    ],
                }
            ],
        }
    )
    anthropic = parse_request(anthropic_body, {}, api=Api.MESSAGES).assets[0]
    assert openai.identity == anthropic.identity


def test_url_is_an_unprobed_reference_never_fetched() -> None:
    url = "https://images.example/cat.jpg"
    view = parse_request(chat(image_part(url, detail="high")), {})
    asset = view.assets[0]
    assert (asset.source, asset.url, asset.detail, asset.probed) == (Source.URL, url, "high", False)
    assert asset.identity == xxhash.xxh3_128_hexdigest(url.encode())
    assert view.unprobed_assets == 1


def test_uuid_is_the_identity_and_may_stand_alone() -> None:
    png = data_uri(image("PNG", 4, 4))
    view = parse_request(
        chat(
            {"type": "image_url", "image_url": {"url": png}, "uuid": "cat-1"},
            {"type": "image_url", "image_url": None, "uuid": "cat-1"},
            {"type": "image_url", "uuid": 42},
        ),
        {},
    )
    first, second, third = view.assets
    assert (first.identity, first.source, first.width) == ("cat-1", Source.INLINE, 4)
    assert (second.identity, second.source, second.width) == ("cat-1", Source.INLINE, 4)  # recognised repeat
    assert (third.identity, third.source) == ("42", Source.UUID)


def test_input_image_and_typeless_forms() -> None:
    png = data_uri(image("PNG", 3, 2))
    view = parse_request(
        chat({"type": "input_image", "image_url": png, "detail": "low"}, {"image_url": "https://x/y.png"}), {}
    )
    a, b = view.assets
    assert (a.width, a.height, a.detail) == (3, 2, "low")
    assert b.source is Source.URL


def test_video_audio_and_embeds_parts() -> None:
    mp4 = (media.DATA / "clip.mp4").read_bytes()
    wav = (media.DATA / "tone.wav").read_bytes()
    view = parse_request(
        chat(
            {"type": "video_url", "video_url": {"url": data_uri(mp4, "video/mp4")}},
            {"type": "input_audio", "input_audio": {"data": b64(wav), "format": "wav"}},
            {"type": "audio_url", "audio_url": {"url": "https://x/a.mp3"}},
            {"type": "image_embeds", "image_embeds": "AAAA"},
        ),
        {},
    )
    video, audio, remote, embeds = view.assets
    assert (video.modality, video.width, video.height, video.duration_s, video.fps) == (
        Modality.VIDEO,
        320,
        240,
        2.0,
        25.0,
    )
    assert (audio.modality, audio.mime, audio.duration_s, audio.sample_rate) == (
        Modality.AUDIO,
        "audio/wav",
        1.5,
        8000,
    )
    assert remote.source is Source.URL and not remote.probed
    assert embeds.modality is Modality.EMBEDS
    assert view.unprobed_assets == 1  # the audio URL; embeds need no probing


def test_headers_fill_what_cannot_be_probed() -> None:
    headers = {
        "X-LLM-D-Video-Resolution": "1920x1080",
        "x-llm-d-video-duration-seconds": "12.5",
        "x-llm-d-video-fps": "30",
        "x-llm-d-audio-duration-seconds": "61",
    }
    view = parse_request(
        chat(
            {"type": "video_url", "video_url": {"url": "https://x/v.mp4"}},
            {"type": "audio_url", "audio_url": {"url": "https://x/a.wav"}},
        ),
        headers,
    )
    video, audio = view.assets
    assert (video.width, video.height, video.duration_s, video.fps, video.probed) == (
        1920,
        1080,
        12.5,
        30.0,
        True,
    )
    assert (audio.duration_s, audio.probed) == (61.0, True)
    assert view.unprobed_assets == 0


def test_headers_do_not_override_probed_values_only_fill_gaps() -> None:
    live = (media.DATA / "live.webm").read_bytes()  # size and fps in the header, no duration
    view = parse_request(
        chat({"type": "video_url", "video_url": {"url": data_uri(live, "video/webm")}}),
        {"x-llm-d-video-resolution": "10x10", "x-llm-d-video-duration-seconds": "3"},
    )
    asset = view.assets[0]
    assert (asset.width, asset.height, asset.duration_s, asset.probed) == (640, 360, 3.0, True)


def test_content_decides_the_format_not_the_label() -> None:
    jpeg = image("JPEG", 20, 10)
    asset = parse_request(chat(image_part(data_uri(jpeg, "image/png"))), {}).assets[0]
    assert (asset.mime, asset.detected_format, asset.width) == ("image/png", "jpeg", 20)


UNCHECKED = Limits(check_media_content=False)


def test_bytes_that_are_no_media_file_are_refused_naming_the_part() -> None:
    body = chat(image_part("data:image/png;base64," + base64.b64encode(b"hello world").decode()))
    with pytest.raises(RequestError) as err:
        parse_request(body, {})
    assert err.value.status == 400 and err.value.param == "messages[0].content[0].image_url.url"
    assert (
        "not an image file" in err.value.message
        and "no image, video, audio or PDF header" in err.value.message
    )


def test_unknown_bytes_are_unprobed_when_the_content_check_is_off() -> None:
    view = parse_request(chat(image_part(data_uri(b"not an image at all"))), {}, limits=UNCHECKED)
    assert view.assets[0].probed is False and view.unprobed_assets == 1


def test_video_in_an_image_part_is_refused_naming_what_it_is() -> None:
    mp4 = (media.DATA / "clip.mp4").read_bytes()
    with pytest.raises(RequestError) as err:
        parse_request(chat(image_part(data_uri(mp4, "image/png"))), {})
    assert err.value.param == "messages[0].content[0].image_url.url"
    assert "a video header (mp4)" in err.value.message


def test_video_in_an_image_part_is_not_taken_as_image_size_when_unchecked() -> None:
    mp4 = (media.DATA / "clip.mp4").read_bytes()
    asset = parse_request(chat(image_part(data_uri(mp4, "image/png"))), {}, limits=UNCHECKED).assets[0]
    assert asset.detected_format == "mp4" and asset.width is None and not asset.probed


def test_a_mislabelled_image_is_priced_by_what_it_is() -> None:
    png = image("PNG", 33, 21)
    asset = parse_request(chat(image_part(data_uri(png, "image/jpeg"))), {}).assets[0]
    assert asset.mime == "image/jpeg" and asset.detected_format == "png"
    assert (asset.width, asset.height) == (33, 21) and asset.probed


def test_text_in_an_input_audio_part_is_refused() -> None:
    part = {"type": "input_audio", "input_audio": {"data": b64(b"just some text bytes"), "format": "wav"}}
    with pytest.raises(RequestError) as err:
        parse_request(chat(part), {})
    assert err.value.param == "messages[0].content[0].input_audio.data"


def test_a_missing_or_empty_model_is_refused_when_required() -> None:
    required = Limits(require_model=True)
    for body in (b'{"messages": []}', b'{"model": "", "messages": []}', b'{"model": " ", "prompt": "x"}'):
        api = Api.COMPLETIONS if b"prompt" in body else Api.CHAT
        with pytest.raises(RequestError) as err:
            parse_request(body, {}, api=api, limits=required)
        assert err.value.param == "model" and err.value.status == 400
    assert parse_request(b'{"messages": []}', {}).model == ""  # the parser alone does not require it


def test_json_escaped_slashes_in_base64_are_unescaped() -> None:
    png = image("PNG", 7, 9)
    text = base64.b64encode(png).decode()
    body = chat(image_part("data:image/png;base64," + text)).replace(b"/", b"\\/")
    asset = parse_request(body, {}).assets[0]
    assert (asset.width, asset.height) == (7, 9)
    assert asset.identity == xxhash.xxh3_128_hexdigest(text.encode())


def test_mime_style_line_breaks_in_base64_are_accepted() -> None:
    png = image("PNG", 30, 40)
    wrapped = base64.encodebytes(png).decode()  # 76-character lines
    asset = parse_request(chat(image_part("data:image/png;base64," + wrapped)), {}).assets[0]
    assert (asset.width, asset.height) == (30, 40)


def test_completions_prompt_shapes() -> None:
    def parse(prompt: object) -> object:
        return parse_request(
            orjson.dumps({"model": "m", "prompt": prompt, "max_tokens": 3}), {}, api=Api.COMPLETIONS
        )

    single = parse("hello")
    assert single.parts == ["hello"] and single.max_tokens == 3  # type: ignore[attr-defined]
    batch = parse(["a", "b"])
    assert batch.parts == ["a", "b"] and batch.extra["prompt_count"] == 2  # type: ignore[attr-defined]
    ids = parse([1, 2, 3])
    assert ids.prompt_token_ids == [1, 2, 3] and ids.parts == []  # type: ignore[attr-defined]
    lists = parse([[1], [2, 3]])
    assert lists.prompt_token_ids == [1, 2, 3] and lists.extra["prompt_count"] == 2  # type: ignore[attr-defined]


def test_anthropic_messages_with_system_url_and_nested_tool_result() -> None:
    png = image("PNG", 16, 9)
    body = orjson.dumps(
        {
            "model": "claude",
            "max_tokens": 100,
            "stream": True,
            "system": [{"type": "text", "text": "You see images."}],
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "Compare"},
                        {"type": "image", "source": {"type": "url", "url": "https://x/a.png"}},
                    ],
                },
                {
                    "role": "assistant",
                    "content": [{"type": "tool_use", "id": "t", "name": "crop", "input": {"box": [1, 2]}}],
                },
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "tool_result",
                            "tool_use_id": "t",
                            "content": [
                                {"type": "text", "text": "cropped:"},
                                {
                                    "type": "image",
                                    "source": {"type": "base64", "media_type": "image/png", "data": b64(png)},
                                },
                            ],
                        }
                    ],
                },
            ],
        }
    )
    view = parse_request(body, {}, api=Api.MESSAGES)
    assert (view.api, view.model, view.stream, view.max_tokens) == (Api.MESSAGES, "claude", True, 100)
    assert isinstance(view.parts[0], str) and view.parts[0].startswith(
        role_header("system") + "You see images.\n"
    )
    url, inline = view.assets
    assert url.source is Source.URL and url.field == "messages[0].content[1].source.url"
    assert (inline.width, inline.height) == (16, 9)
    assert inline.field == "messages[2].content[0].content[1].source.data"
    assert any('crop({"box":[1,2]})' in t for t in view.texts)


def test_audio_part_carrying_mp4_reads_its_duration() -> None:
    part = {"type": "input_audio", "input_audio": {"data": b64(media.m4a(4.0, 16000, 1)), "format": "m4a"}}
    asset = parse_request(chat(part), {}).assets[0]
    assert (asset.detected_format, asset.duration_s, asset.sample_rate, asset.probed) == (
        "mp4",
        4.0,
        16000,
        True,
    )


def test_each_inline_payload_is_hashed_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Hashing megabytes is the costliest step of a parse: a clean payload must not pay it twice."""
    hashed: list[int] = []
    real = xxhash.xxh3_128_hexdigest

    def counting(payload: bytes | memoryview) -> str:
        hashed.append(len(payload))
        return real(payload)

    # xxhash's own function, not mmgate's wrapper: a compiled mmgate calls its functions natively,
    # past any patch of its module attributes, but looks xxhash's up on each call.
    monkeypatch.setattr(xxhash, "xxh3_128_hexdigest", counting)
    png = image("png", 64, 48)
    view = parse_request(chat(image_part(data_uri(png)), image_part(data_uri(png[:-1] + b"x"))), {})
    assert len(view.assets) == 2 and len(hashed) == 2
    assert view.assets[0].identity == xxhash.xxh3_128_hexdigest(b64(png).encode())


@pytest.mark.parametrize("api", list(Api))
@pytest.mark.parametrize("body", [b"", b"  \r\n"])
def test_an_empty_body_is_said_to_be_empty(api: Api, body: bytes) -> None:
    """Not msgspec's "Input data was truncated", which reads as a body cut short in transit."""
    with pytest.raises(RequestError) as caught:
        parse_request(body, {}, api=api)
    assert caught.value.status == 400
    assert caught.value.message == "The request body is empty."
    assert caught.value.code == "empty_body"
