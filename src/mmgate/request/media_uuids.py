"""Writing the gateway's media identities into a chat body as each part's ``uuid``.

vLLM keys a media item by its ``mm_hash``: a hash of the decoded media (blake3 by default, with
the model id), which a gateway cannot reproduce without decoding pixels. But a chat content part
may carry ``"uuid"`` (vLLM reads it into ``multi_modal_uuids``), and vLLM then uses that string as
the item's identifier: in its processor and encoder caches, in the prefix-cache block keys and so
in the ``extra_keys`` of its KV events. Writing mmgate's own identity there (the xxh3-128 of the
payload as sent) makes the engine, its events and the gateway's precise index agree by
construction, as Dynamo does with its own media hashes.

The body is not re-serialised: ``,"uuid":"..."`` is spliced in before each content part object's
closing brace, whose offset comes from the body's structural walk
(:class:`~mmgate.request.layout.ChatLayout`; the parse already made it for a large body, so the
megabytes are not walked again). The added member comes last in the part, so it also wins over a
client's explicit ``"uuid": null`` (Python's JSON decoders keep the last duplicate). Parts that
carry a uuid already are left alone; a body that repeats a key in the root, a message or a part is
left as it is: decoders disagree on which copy counts, and a uuid must never land on another item
than the one it names.

Only OpenAI chat bodies are touched (``messages[i].content[j]`` parts): the Anthropic and
Responses shapes have no such field, and documents are not vLLM multimodal items.
"""

from __future__ import annotations

import re

import msgspec

from mmgate.errors import RequestError
from mmgate.request.layout import Part, scan_chat
from mmgate.request.payload import Buffer, identity_of
from mmgate.request.pieces import Body, BodyPieces
from mmgate.request.view import Api, MediaAsset, Modality, RequestView

SPLICED = frozenset({Modality.IMAGE, Modality.VIDEO, Modality.AUDIO, Modality.EMBEDS})
"""The kinds of part vLLM turns into multimodal items (and so reads a ``uuid`` on)."""

_PART = re.compile(r"messages\[(\d+)\]\.content\[(\d+)\]")
_IDENTITY_FORM = re.compile(r"[0-9a-f]{32}")  # what identity_of returns: xxh3-128 in hex


def uuids_to_write(view: RequestView) -> dict[Part, str]:
    """``(message, part) -> identity`` for every media part of a chat request the client gave no
    uuid (a repeated item appears once per part that holds it)."""
    if view.api is not Api.CHAT:
        return {}
    out: dict[Part, str] = {}
    for asset in view.parts:  # not view.assets: a text request builds no list
        if not isinstance(asset, MediaAsset) or asset.client_uuid or asset.modality not in SPLICED:
            continue
        found = _PART.match(asset.field)
        if found is not None:
            out[(int(found[1]), int(found[2]))] = asset.identity
    return out


def check_client_uuid(uuid: str, data: Buffer | str | None, param: str, identity: str | None = None) -> None:
    """Refuse a client ``uuid`` that has the form of the gateway's identities but does not name
    the part's own data (its payload as sent, or its URL; ``identity`` is the data's when the
    caller has it already).

    vLLM trusts a uuid: an item processed under uuid U is served to every later request naming U.
    Since the gateway writes content hashes as uuids, a client could otherwise send its own image
    under the hash of someone else's well-known image and have vLLM answer them with its features.
    A uuid-only part (no data) only refers to what is cached, and is kept.
    """
    if data is None or not _IDENTITY_FORM.fullmatch(uuid) or (identity or identity_of(data)) == uuid:
        return
    found = _PART.match(param)
    where = f"{found[0]}.uuid" if found is not None else param
    raise RequestError(
        f"The uuid at '{where}' has the form of the gateway's content identities (32 hex digits) "
        "but does not match the part's data; use another form (e.g. a UUID with dashes).",
        param=where,
        code="invalid_uuid",
    )


def with_media_uuids(view: RequestView) -> Body:
    """``view.body`` with a ``uuid`` on each media part that had none, as pieces of the original
    bytes around the inserted members (the same object when no part needs one). ``view`` must come
    from parsing exactly that body; its ``layout``, when the parse recorded one for that body, says
    where the parts end, else the body is walked here."""
    body = view.body
    wanted = uuids_to_write(view)
    if not wanted or not isinstance(body, bytes):  # nothing to write, or spliced already
        return body
    layout = view.layout if view.layout is not None and view.layout.body is body else scan_chat(body)
    if layout is None or layout.repeated_key:
        return body
    ends = layout.part_ends
    inserts = sorted(
        (ends[part], b',"uuid":' + msgspec.json.encode(identity))
        for part, identity in wanted.items()
        if part in ends
    )  # parts end at distinct offsets: the members are never compared
    return BodyPieces(body, inserts) if inserts else body
