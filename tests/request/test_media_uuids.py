"""The gateway's media identities spliced into chat bodies as each part's ``uuid``: the result is
the JSON a re-serialisation would give, parts with a uuid keep theirs, and nothing lands on the
wrong part, whatever the body's layout."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path
from typing import Any

import orjson
import pytest

from mmgate.errors import RequestError
from mmgate.request import parse_request
from mmgate.request.decode import MIN_BODY
from mmgate.request.layout import scan_chat
from mmgate.request.limits import Limits
from mmgate.request.media_uuids import uuids_to_write, with_media_uuids
from mmgate.request.payload import identity_of
from mmgate.request.pieces import BodyPieces, joined
from mmgate.request.view import Api, RequestView
from support.bodies import photo_chat
from support.stack import data_url, png

OWN = Limits(own_media_uuids=True)


def parsed(doc: dict[str, Any] | bytes, api: Api = Api.CHAT, limits: Limits = OWN) -> RequestView:
    body = doc if isinstance(doc, bytes) else json.dumps(doc).encode()
    return parse_request(body, {}, api=api, limits=limits)


def spliced(view: RequestView) -> bytes:
    """The body the gateway forwards for ``view``, as one ``bytes`` object."""
    return joined(with_media_uuids(view))


def image_part(seed: int, **extra: Any) -> dict[str, Any]:
    return {"type": "image_url", "image_url": {"url": data_url(png(seed))}, **extra}


def expected(doc: dict[str, Any]) -> dict[str, Any]:
    """What re-serialising would give: each media part without a uuid gets its payload's identity."""
    out: dict[str, Any] = json.loads(json.dumps(doc))
    for message in out["messages"]:
        if not isinstance(message.get("content"), list):
            continue
        for part in message["content"]:
            if part.get("uuid") is not None:
                continue
            for field in ("image_url", "video_url", "audio_url"):
                ref = part.get(field)
                if ref is not None:
                    url = ref if isinstance(ref, str) else ref["url"]
                    payload = url.split(",", 1)[1] if url.startswith("data:") else url
                    part["uuid"] = identity_of(payload)
            if "input_audio" in part:
                part["uuid"] = identity_of(part["input_audio"]["data"])
    return out


def test_each_media_part_without_a_uuid_gets_its_identity_and_the_rest_is_byte_identical() -> None:
    doc = {
        "model": "m",
        "messages": [
            {"role": "system", "content": 'Quote "this" \\ and that \u00e9.'},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": 'a "quoted" \\" tricky } ] { [ text'},
                    image_part(1, detail="ignored"),
                    image_part(2, uuid="client-chosen"),
                    {"type": "image_url", "image_url": "https://example.com/cat.png"},
                    image_part(1),  # a repeat: its own part gets the same identity
                ],
            },
        ],
        "max_tokens": 3,
    }
    view = parsed(doc)
    out = spliced(view)
    assert json.loads(out) == expected(doc)
    assert json.loads(out)["messages"][1]["content"][2]["uuid"] == "client-chosen"
    # only the inserted members differ from the client's bytes
    members = {f',"uuid":"{i}"'.encode() for i in uuids_to_write(view).values()}
    assert len(members) == 2  # the repeat's identity is the first image's
    stripped = out
    for member in members:
        stripped = stripped.replace(member, b"")
    assert stripped == view.body and len(out) == len(view.body) + sum(
        len(f',"uuid":"{i}"') for i in uuids_to_write(view).values()
    )


def test_the_spliced_body_is_pieces_of_the_clients_bytes_not_a_copy() -> None:
    """A large image body is forwarded as slices of the client's own buffer around the inserted
    members: nothing the size of the body is allocated per request."""
    padded = png(10) + random.Random(10).randbytes(200_000)
    doc = {"model": "m", "messages": [{"role": "user", "content": [image_part(11), {
        "type": "image_url", "image_url": {"url": data_url(padded)}}]}]}  # fmt: skip
    view = parsed(orjson.dumps(doc))
    out = with_media_uuids(view)
    assert isinstance(out, BodyPieces) and len(out) == len(joined(out))
    pieces = list(out)
    body = view.body
    assert isinstance(body, bytes)
    kept = [p for p in pieces if isinstance(p, memoryview)]
    assert [p.obj for p in kept] == [body] * 3  # before, between and after the two insertions
    assert sum(p.nbytes for p in kept) == len(body)
    assert len(out) == len(body) + sum(len(f',"uuid":"{i}"') for i in uuids_to_write(view).values())
    view.body = out  # as the gateway's parse step leaves it: writing again adds nothing
    assert with_media_uuids(view) is out


def test_pretty_printed_and_large_bodies_are_spliced_the_same() -> None:
    padded = png(3) + random.Random(3).randbytes(100_000)  # bytes after IEND: still a PNG header
    big = {"type": "image_url", "image_url": {"url": data_url(padded)}}
    doc = {"model": "m", "messages": [{"role": "user", "content": [{"type": "text", "text": "x"}, big]}]}
    for body in (json.dumps(doc, indent=2).encode(), orjson.dumps(doc)):
        view = parsed(body)
        assert len(body) > 64 * 1024  # the cut path of decode_chat
        assert json.loads(spliced(view)) == expected(doc)


def test_an_explicit_null_uuid_is_overridden_by_the_last_member() -> None:
    doc = {"model": "m", "messages": [{"role": "user", "content": [image_part(4, uuid=None)]}]}
    view = parsed(doc)
    assert json.loads(spliced(view))["messages"][0]["content"][0]["uuid"] == view.assets[0].identity


def test_audio_and_type_less_parts_are_covered() -> None:
    doc = {
        "model": "m",
        "messages": [
            {
                "role": "user",
                "content": [
                    {"image_url": {"url": data_url(png(5))}},
                    {"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"}},
                ],
            }
        ],
    }
    view = parse_request(json.dumps(doc).encode(), {}, api=Api.CHAT, limits=Limits(check_media_content=False))
    assert json.loads(spliced(view)) == expected(doc)


def test_bodies_without_media_or_of_other_apis_are_returned_as_they_are() -> None:
    text = parsed({"model": "m", "messages": [{"role": "user", "content": "hello"}]})
    assert with_media_uuids(text) is text.body
    anthropic = {
        "model": "m",
        "max_tokens": 4,
        "messages": [
            {
                "role": "user",
                "content": [{"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}}],
            }
        ],
    }
    view = parsed(anthropic, api=Api.MESSAGES)
    assert view.assets and with_media_uuids(view) is view.body


def test_a_repeated_key_leaves_the_body_alone() -> None:
    """Decoders disagree on which copy of a repeated key counts, so a uuid could name another
    item than the one the model server reads: nothing is written."""
    part = json.dumps(image_part(6))
    for body in (
        b'{"model":"m","messages":[],"messages":[{"role":"user","content":[' + part.encode() + b"]}]}",
        b'{"model":"m","messages":[{"role":"user","content":[],"content":[' + part.encode() + b"]}]}",
        b'{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":'
        b'{"url":"https://a.example/x.png"},"image_url":{"url":"https://b.example/y.png"}}]}]}',
    ):
        view = parsed(body)
        assert with_media_uuids(view) is view.body


def test_part_ends_finds_each_part_whatever_the_nesting() -> None:
    body = (
        b'{"tools":[{"a":[{"b":"}"}]}],"messages":[{"role":"user","content":"x"},'
        b'{"role":"user","content":[{"type":"text","text":"\\\\"},{"k":{"n":[1,2,{"z":"]"}]}}]}]}'
    )
    layout = scan_chat(body)
    assert layout is not None and not layout.repeated_key
    ends = layout.part_ends
    assert set(ends) == {(1, 0), (1, 1)}
    assert body[ends[(1, 0)]] == ord("}") and body[: ends[(1, 0)] + 1].endswith(b'"\\\\"}')
    assert body[ends[(1, 1)] - 4 : ends[(1, 1)] + 1] == b'"]"}]}}'[-5:]


# --- the splice against the walk it replaced ---------------------------------------------------
# Until the parser recorded the layout, the splice walked the body itself with the walk below
# (kept here as the reference): every body must come out byte for byte as it did.


class _Frame:
    def __init__(self, is_object: bool, path: tuple[str | int, ...]) -> None:
        self.is_object, self.path, self.slot, self.expecting_key = is_object, path, 0, is_object
        self.keys: set[str] | None = set() if is_object and len(path) in (0, 2, 4) else None


def _string_end(body: bytes, quote: int) -> int:
    end = body.find(b'"', quote + 1)
    while len(re.search(rb"\\*$", body[quote + 1 : end])[0]) % 2:  # type: ignore[index]
        end = body.find(b'"', end + 1)
    return end


def reference_part_ends(body: bytes, parts: set[tuple[int, int]]) -> dict[tuple[int, int], int] | None:
    found: dict[tuple[int, int], int] = {}
    stack: list[_Frame] = []
    at = 0
    while (token := re.compile(rb'["{}\[\],]').search(body, at)) is not None:
        at = token.start()
        char = body[at : at + 1]
        if char == b'"':
            end = _string_end(body, at)
            if stack and stack[-1].expecting_key:
                frame = stack[-1]
                key = json.loads(body[at : end + 1])
                if frame.keys is not None:
                    if key in frame.keys:
                        return None
                    frame.keys.add(key)
                frame.slot, frame.expecting_key = key, False
            at = end + 1
            continue
        if char in b"{[":
            stack.append(_Frame(char == b"{", (*stack[-1].path, stack[-1].slot) if stack else ()))
        elif char in b"}]":
            frame = stack.pop()
            path = frame.path
            part = (int(path[1]), int(path[3])) if len(path) == 4 and path[0] == "messages" else None
            if part is not None and path[2] == "content" and frame.is_object and part in parts:
                found[part] = at
        elif stack[-1].is_object:
            stack[-1].expecting_key = True
        else:
            stack[-1].slot = int(stack[-1].slot) + 1
        at += 1
    return found


def reference_splice(view: RequestView) -> bytes:
    wanted = uuids_to_write(view)
    ends = reference_part_ends(view.body, set(wanted)) if wanted else None
    if ends is None:
        return view.body
    out = view.body
    for at, identity in sorted(((ends[p], i) for p, i in wanted.items() if p in ends), reverse=True):
        out = out[:at] + b',"uuid":' + json.dumps(identity).encode() + out[at:]
    return out


def _big_image(seed: int) -> dict[str, Any]:
    padded = png(seed) + random.Random(seed).randbytes(MIN_BODY)  # bytes after IEND: still a PNG
    return {"type": "image_url", "image_url": {"url": data_url(padded)}}


_TRICKY = 'a "quoted" \\" \\\\ tricky } ] { [ , : text \u00e9 \u2028'


def _adversarial() -> list[bytes]:
    """Escapes, nesting, whitespace and repeated keys, each with small and large images."""
    out: list[bytes] = []
    for image in (image_part, _big_image):
        doc = {
            "model": "m",
            "k" * 300: ["v" * 256, "w" * 257, "\\" * 300, {"u" * 257: "url"}],  # around the 256 bound
            "tools": [{"type": "function", "function": {"name": "f", "parameters": {"x": [{"}": "]"}]}}}],
            "messages": [
                {"role": "system", "content": _TRICKY},
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": _TRICKY},
                        {"type": "text", "text": _TRICKY * 20, "url": "data:" + "x" * 300},
                        image(1),
                        {**image(2), "uuid": None},
                        {**image(3), "uuid": "client"},
                        {"type": "image_url", "image_url": "https://example.com/a.png", "x": {"y": [[], {}]}},
                        {"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"}},
                    ],
                },
                {"role": "assistant", "content": "ok", "tool_calls": [{"function": {"name": "g"}}]},
                {"role": "user", "content": [image(1), {"type": "text", "text": "\\"}]},
            ],
        }
        for indent in (None, 0, 1, "\t", " \r\n "):
            out.append(json.dumps(doc, indent=indent, ensure_ascii=indent is None).encode())
        out.append(json.dumps(doc, separators=(" ,\n", "\r\n :\t")).encode())  # blanks before ':'
        compact = json.dumps(doc, separators=(",", ":")).encode()
        out.append(compact.replace(b'"content"', b'"\\u0063ontent"', 1))  # an escaped key
        out.append(compact.replace(b'"model":"m"', b'"model":"m","model":"n"'))  # repeats
        out.append(compact.replace(b'"role":"system"', b'"role":"system","role":"user"'))
        out.append(compact.replace(b'"parameters":', b'"name":"h","parameters":'))  # depth 4 elsewhere
        repeat_in_part = b'{"type":"text","type":"text","text":""}'
        out.append(compact.replace(b'{"type":"text","text":"\\\\"}', repeat_in_part))
    return out


def _examples() -> list[bytes]:
    here = Path(__file__).resolve().parents[2] / "examples" / "requests"
    return [photo_chat(1), photo_chat(3), photo_chat(1, by_url=True)] + [
        p.read_bytes() for p in sorted(here.glob("*chat*.json")) + sorted(here.glob("images-*.json"))
    ]


def test_the_splice_is_byte_identical_to_the_walk_it_replaced() -> None:
    bodies = _examples() + _adversarial()
    lax = Limits(own_media_uuids=True, check_media_content=False)
    for body in bodies:
        view = parsed(body, limits=lax)
        if len(body) >= MIN_BODY:  # the parse recorded where the parts end: no second walk
            assert view.layout is not None and view.layout.body is view.body
        else:
            assert view.layout is None
        assert spliced(view) == reference_splice(view)
    changed = [b for b in bodies if spliced(parsed(b, limits=lax)) != b]
    assert len(changed) > len(bodies) // 2  # most bodies get uuids; the repeats are left alone


def test_random_layouts_give_what_re_serialising_gives() -> None:
    rng = random.Random(7)
    images = [png(i) for i in range(4)]
    for _ in range(40):
        messages: list[dict[str, Any]] = []
        for _m in range(rng.randint(1, 4)):
            content: list[dict[str, Any]] = []
            for _p in range(rng.randint(0, 4)):
                if rng.random() < 0.4:
                    text = "".join(rng.choice('ab "\\}{][,:\u00e9') for _ in range(rng.randint(0, 12)))
                    content.append({"type": "text", "text": text})
                else:
                    extra = {"uuid": f"u-{rng.randint(0, 9)}"} if rng.random() < 0.3 else {}
                    content.append(
                        {"type": "image_url", "image_url": {"url": data_url(rng.choice(images))}, **extra}
                    )
            messages.append({"role": rng.choice(["user", "assistant"]), "content": content or "plain"})
        doc = {"messages": messages, "model": "m", "stream": rng.random() < 0.5}
        body = json.dumps(doc, indent=rng.choice([None, 1]), ensure_ascii=rng.random() < 0.5).encode()
        view = parsed(body)
        assert json.loads(spliced(view)) == expected(doc)
        assert spliced(view) == reference_splice(view)


def test_a_client_uuid_in_the_gateways_form_must_name_the_parts_own_data() -> None:
    """Otherwise a client could have vLLM cache its own image under the identity of someone
    else's, and the gateway would then send theirs under that uuid."""
    mine, theirs = png(8), png(9)
    forged = identity_of(data_url(theirs).split(",", 1)[1])
    doc = {"model": "m", "messages": [{"role": "user", "content": [image_part(8, uuid=forged)]}]}
    with pytest.raises(RequestError) as caught:
        parsed(doc)
    assert caught.value.status == 400 and caught.value.param == "messages[0].content[0].uuid"
    honest = identity_of(data_url(mine).split(",", 1)[1])
    assert parsed({**doc, "messages": [{"role": "user", "content": [image_part(8, uuid=honest)]}]}).assets
    # a reference to a cached item (no data) and other forms are the client's business
    ref = {"type": "image_url", "uuid": forged}
    cached = parsed({"model": "m", "messages": [{"role": "user", "content": [ref]}]})
    assert cached.assets[0].identity == forged
    assert parsed(doc, limits=Limits()).assets[0].identity == forged  # mediaUuids off: not checked
