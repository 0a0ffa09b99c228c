"""Writing the gateway's media identities into a chat body as each part's ``uuid``.

vLLM keys a media item by its ``mm_hash``: a hash of the decoded media (blake3 by default, with
the model id), which a gateway cannot reproduce without decoding pixels. But a chat content part
may carry ``"uuid"`` (vLLM reads it into ``multi_modal_uuids``), and vLLM then uses that string as
the item's identifier: in its processor and encoder caches, in the prefix-cache block keys and so
in the ``extra_keys`` of its KV events. Writing mmgate's own identity there (the xxh3-128 of the
payload as sent) makes the engine, its events and the gateway's precise index agree by
construction, as Dynamo does with its own media hashes.

The body is not re-serialised: a multi-megabyte chat body is walked once for its structure only
(strings are skipped with ``bytes.find``, which is memchr; base64 holds no quote) to find where
each content part object ends, and ``,"uuid":"..."`` is spliced in before its closing brace. The
added member comes last in the part, so it also wins over a client's explicit ``"uuid": null``
(Python's JSON decoders keep the last duplicate). Parts that carry a uuid already are left alone.

Only OpenAI chat bodies are touched (``messages[i].content[j]`` parts): the Anthropic and
Responses shapes have no such field, and documents are not vLLM multimodal items.
"""

from __future__ import annotations

import re
from collections.abc import Collection

import msgspec

from mmgate.errors import RequestError
from mmgate.request.payload import Buffer, identity_of
from mmgate.request.view import Api, Modality, RequestView

SPLICED = frozenset({Modality.IMAGE, Modality.VIDEO, Modality.AUDIO, Modality.EMBEDS})
"""The kinds of part vLLM turns into multimodal items (and so reads a ``uuid`` on)."""

_PART = re.compile(r"messages\[(\d+)\]\.content\[(\d+)\]")
_IDENTITY_FORM = re.compile(r"[0-9a-f]{32}")  # what identity_of returns: xxh3-128 in hex
_TOKEN = re.compile(rb'["{}\[\],]')
_Part = tuple[int, int]


def uuids_to_write(view: RequestView) -> dict[_Part, str]:
    """``(message, part) -> identity`` for every media part of a chat request the client gave no
    uuid (a repeated item appears once per part that holds it)."""
    if view.api is not Api.CHAT:
        return {}
    out: dict[_Part, str] = {}
    for asset in view.assets:
        if asset.client_uuid or asset.modality not in SPLICED:
            continue
        found = _PART.match(asset.field)
        if found is not None:
            out[(int(found[1]), int(found[2]))] = asset.identity
    return out


def check_client_uuid(uuid: str, data: Buffer | str | None, param: str) -> None:
    """Refuse a client ``uuid`` that has the form of the gateway's identities but does not name
    the part's own data (its payload as sent, or its URL).

    vLLM trusts a uuid: an item processed under uuid U is served to every later request naming U.
    Since the gateway writes content hashes as uuids, a client could otherwise send its own image
    under the hash of someone else's well-known image and have vLLM answer them with its features.
    A uuid-only part (no data) only refers to what is cached, and is kept.
    """
    if data is None or not _IDENTITY_FORM.fullmatch(uuid) or identity_of(data) == uuid:
        return
    found = _PART.match(param)
    where = f"{found[0]}.uuid" if found is not None else param
    raise RequestError(
        f"The uuid at '{where}' has the form of the gateway's content identities (32 hex digits) "
        "but does not match the part's data; use another form (e.g. a UUID with dashes).",
        param=where,
        code="invalid_uuid",
    )


def with_media_uuids(view: RequestView) -> bytes:
    """``view.body`` with a ``uuid`` on each media part that had none (the same object when none
    needs one). ``view`` must come from parsing exactly that body."""
    wanted = uuids_to_write(view)
    if not wanted:
        return view.body
    body = view.body
    ends = part_ends(body, wanted.keys())
    if ends is None:
        return body
    inserts = sorted((ends[part], identity) for part, identity in wanted.items() if part in ends)
    mv = memoryview(body)
    pieces: list[bytes | memoryview] = []
    kept = 0
    for at, identity in inserts:
        pieces.append(mv[kept:at])
        pieces.append(b',"uuid":' + msgspec.json.encode(identity))
        kept = at
    pieces.append(mv[kept:])
    return b"".join(pieces)


def part_ends(body: bytes, parts: Collection[_Part]) -> dict[_Part, int] | None:
    """The offset of the closing ``}`` of each content part object ``messages[i].content[j]`` in
    ``parts`` (valid JSON assumed: the body was decoded already), or ``None`` when the body
    repeats a key in the root, a message or a part: decoders disagree on which copy counts, and
    a uuid must never land on another item than the one it names.

    The walk keeps one frame per open container with its path from the root (keys and array
    indices); strings are jumped over whole, so its cost is a memchr over the media payloads
    plus a step per JSON token outside them.
    """
    wanted = set(parts)
    found: dict[_Part, int] = {}
    stack: list[_Frame] = []
    find = body.find
    search = _TOKEN.search
    at = 0
    while (token := search(body, at)) is not None:
        at = token.start()
        char = body[at]
        if char == 0x22:  # '"': a key or a string value; jump to its closing quote
            end = find(b'"', at + 1)
            while body[end - 1] == 0x5C and _escaped(body, end):  # most strings end unescaped
                end = find(b'"', end + 1)
            frame = stack[-1] if stack else None
            if frame is not None and frame.expecting_key:
                raw = body[at + 1 : end]
                key = raw.decode() if b"\\" not in raw else str(msgspec.json.decode(body[at : end + 1]))
                if frame.keys is not None:
                    if key in frame.keys:
                        return None
                    frame.keys.add(key)
                frame.slot = key
                frame.expecting_key = False
            at = end + 1
            continue
        if char == 0x7B or char == 0x5B:  # '{' or '['
            path = (*stack[-1].path, stack[-1].slot) if stack else ()
            stack.append(_Frame(char == 0x7B, path))
        elif char == 0x7D or char == 0x5D:  # '}' or ']'
            frame = stack.pop()
            path = frame.path
            if len(path) == 4 and path[0] == "messages" and path[2] == "content" and frame.is_object:
                part = (int(path[1]), int(path[3]))
                if part in wanted:
                    found[part] = at
        else:  # ','
            frame = stack[-1]
            if frame.is_object:
                frame.expecting_key = True
            else:
                frame.slot = int(frame.slot) + 1
        at += 1
    return found


class _Frame:
    """One open object or array of the walk: its path, and its current key or element index."""

    __slots__ = ("expecting_key", "is_object", "keys", "path", "slot")

    def __init__(self, is_object: bool, path: tuple[str | int, ...]) -> None:
        self.is_object = is_object
        self.path = path
        self.slot: str | int = 0
        self.expecting_key = is_object
        # keys seen, where a repeat could move a uuid: the root, each message, each part
        self.keys: set[str] | None = set() if is_object and len(path) in (0, 2, 4) else None


def _escaped(body: bytes, quote: int) -> bool:
    """Whether the quote at ``quote`` is escaped (an odd run of backslashes before it)."""
    run = 0
    while body[quote - 1 - run] == 0x5C:
        run += 1
    return run % 2 == 1
