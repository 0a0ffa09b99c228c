"""Property tests: whatever a client sends, parse_request answers a view or a RequestError (never a 500)."""

from __future__ import annotations

import json
import os

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mmgate.errors import RequestError
from mmgate.request import Api, RequestView, parse_request

_EXAMPLES = int(os.environ.get("MMGATE_FUZZ_EXAMPLES", "150"))
FUZZ = settings(max_examples=_EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])

_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False)
    | st.text(max_size=20)
)
_json = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)
_keys = st.sampled_from(
    [
        "type",
        "text",
        "image_url",
        "video_url",
        "audio_url",
        "input_audio",
        "image_embeds",
        "uuid",
        "url",
        "data",
        "format",
        "detail",
        "source",
        "content",
        "media_type",
        "role",
        "input",
        "name",
    ]
)
_urls = st.sampled_from(
    [
        "data:image/png;base64,iVBORw0KGgo=",
        "data:image/png;base64,",
        "data:,x",
        "data:video/mp4;base64,AAAA",
        "https://x/y.png",
        "file:///etc/passwd",
        "",
        "data:image/png;base64,@@@@",
        "ftp://x",
    ]
)
_values = (
    _json
    | _urls
    | st.fixed_dictionaries({"url": _urls | _json})
    | st.fixed_dictionaries(
        {"type": st.sampled_from(["base64", "url", "file", "x"]), "data": _urls | _json, "url": _urls}
    )
)
_parts = st.dictionaries(
    _keys, _values | st.sampled_from(["image_url", "text", "image", "tool_result"]), max_size=4
)
_messages = st.lists(
    st.fixed_dictionaries(
        {"role": st.sampled_from(["user", "assistant", "system"]) | _json},
        optional={"content": st.text(max_size=10) | st.lists(_parts, max_size=4) | _json},
    ),
    max_size=3,
)
_bodies = st.fixed_dictionaries(
    {},
    optional={
        "model": st.text(max_size=5) | _json,
        "messages": _messages | _json,
        "prompt": _json,
        "system": _json,
        "stream": _json,
        "max_tokens": _json,
    },
)


def _answer(body: bytes, api: Api) -> None:
    try:
        view = parse_request(body, {"x-llm-d-video-resolution": "64x64"}, api=api)
    except RequestError as exc:
        assert 400 <= exc.status < 500 and exc.message
        return
    assert isinstance(view, RequestView) and view.body is body


@FUZZ
@given(body=_bodies, api=st.sampled_from(list(Api)))
def test_structured_bodies_give_a_view_or_a_request_error(body: dict[str, object], api: Api) -> None:
    _answer(json.dumps(body).encode(), api)


@FUZZ
@given(
    body=st.binary(max_size=300) | _json.map(lambda v: json.dumps(v).encode()), api=st.sampled_from(list(Api))
)
def test_arbitrary_bytes_give_a_view_or_a_request_error(body: bytes, api: Api) -> None:
    _answer(body, api)


@FUZZ
@given(
    name=st.sampled_from(
        [
            "x-llm-d-video-fps",
            "x-llm-d-video-duration-seconds",
            "x-llm-d-video-resolution",
            "x-llm-d-audio-duration-seconds",
        ]
    ),
    value=st.text(max_size=24),
)
def test_any_media_header_value_gives_a_view_or_a_request_error(name: str, value: str) -> None:
    body = b'{"messages": [{"role": "user", "content": [{"video_url": {"url": "https://x/v.mp4"}}]}]}'
    try:
        view = parse_request(body, {name: value})
    except RequestError as exc:
        assert exc.param == name
        return
    assert view.assets[0].url == "https://x/v.mp4"


_BIG = json.dumps(
    {
        "model": "m",
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "look"},
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64," + "QUFB" * 20_000}},
                ],
            }
        ],
    }
).encode()


_POSITIONS = st.integers(0, 200) | st.integers(len(_BIG) - 120, len(_BIG) - 1) | st.integers(0, len(_BIG) - 1)
_BYTES = st.sampled_from(list(b'"\\\n{}[],: \x00')) | st.integers(0, 255)


@FUZZ
@given(flips=st.lists(st.tuples(_POSITIONS, _BYTES), min_size=1, max_size=6))
def test_corrupted_large_bodies_give_a_view_or_a_request_error(flips: list[tuple[int, int]]) -> None:
    # Over 64 KiB, so the data-URI cutting decode (request/decode.py) is the path under test.
    data = bytearray(_BIG)
    for pos, value in flips:
        data[pos] = value
    _answer(bytes(data), Api.CHAT)
