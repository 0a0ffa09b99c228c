"""OpenAI chat completions: each turn rendered in order into :attr:`RequestView.parts`.

Chat turns start with a role header (``<|user|>\\n``) and end with ``\\n``, the same for OpenAI and
Anthropic bodies, so equal conversation prefixes always give equal part sequences, which
prefix-affinity routing relies on. The other APIs that carry chat messages or parts (responses,
pooling, scoring, tokenizer, Anthropic messages) render them with these functions.
"""

from __future__ import annotations

from typing import Protocol

import msgspec

from mmgate.errors import RequestError
from mmgate.request import bodies
from mmgate.request.assets import PromptBuilder
from mmgate.request.decode import CutMediaRef
from mmgate.request.payload import json_string
from mmgate.request.view import Api, Modality, RequestView

_TEXT_TYPES = frozenset({"text", "input_text", "refusal"})
_URL_PARTS = {
    "image_url": Modality.IMAGE,
    "input_image": Modality.IMAGE,
    "video_url": Modality.VIDEO,
    "audio_url": Modality.AUDIO,
}
_EMBEDS = ("image_embeds", "audio_embeds", "video_embeds")


def role_header(role: str) -> str:
    """The text that opens a chat turn in :attr:`RequestView.parts`."""
    return f"<|{role}|>\n"


ROLE_HEADERS = {role: role_header(role) for role in ("system", "developer", "user", "assistant", "tool")}


def parse_chat(req: bodies.ChatBody, b: PromptBuilder) -> RequestView:
    render_messages(req.messages, b)
    max_tokens = req.max_completion_tokens if req.max_completion_tokens is not None else req.max_tokens
    return RequestView(
        api=Api.CHAT,
        model=req.model,
        parts=b.finish(),
        stream=bool(req.stream),
        max_tokens=max_tokens,
        cache_salt=req.cache_salt,
    )


def render_messages(messages: list[bodies.ChatMessage], b: PromptBuilder) -> None:
    """Chat turns into ``b`` in order (also the ``messages`` form of vLLM's pooling and tokenizer
    APIs, which take chat messages as chat does)."""
    text = b.text
    for i, msg in enumerate(messages):
        header = ROLE_HEADERS.get(msg.role) or role_header(msg.role)
        content = msg.content
        if isinstance(content, str) and not msg.tool_calls:  # the common turn: one piece
            text(header + content + "\n")
            continue
        text(header)
        if isinstance(content, str):
            text(content)
        elif content is not None:
            for j, part in enumerate(content):
                chat_part(part, f"messages[{i}].content[{j}]", b)
        for call in msg.tool_calls or ():
            if call.function is not None:
                text(f"{call.function.name}({call.function.arguments})")
        text("\n")


def _part_type(part: bodies.ChatPart, param: str) -> str:
    """The declared type, or the one implied by the single field of a type-less simple form."""
    if part.type is not None:
        return part.type
    for name in ("text", "image_url", "video_url", "audio_url", "input_audio", *_EMBEDS):
        value = getattr(part, name)
        if value is not None and not (isinstance(value, msgspec.Raw) and not len(value)):
            return name
    raise RequestError(f"Content part at '{param}' has no 'type'.", param=f"{param}.type")


def chat_part(part: bodies.ChatPart, param: str, b: PromptBuilder) -> None:
    """One chat content part (text, media by URL or inline, embeddings) into ``b``."""
    kind = _part_type(part, param)
    if kind in _TEXT_TYPES:
        text = part.refusal if kind == "refusal" else part.text
        if text is None:
            raise RequestError(f"Missing '{param}.{kind}'.", param=f"{param}.{kind}")
        b.text(text)
    elif kind in _URL_PARTS:
        field = "image_url" if kind == "input_image" else kind
        ref = getattr(part, field)
        where = f"{param}.{field}"
        if isinstance(ref, str):
            uri: memoryview | None = memoryview(ref.encode())
            detail = part.detail
        elif ref is None:
            uri, detail = None, part.detail
        else:
            where += ".url"
            uri, detail = json_string(ref.url, where), ref.detail or part.detail
        b.media(
            _URL_PARTS[kind],
            where if uri is not None else param,
            uri=uri,
            uuid=part.uuid,
            detail=detail,
            known=ref.identity if isinstance(ref, CutMediaRef) else None,  # validated and hashed while cut
        )
    elif kind == "input_audio":
        audio = part.input_audio
        where = f"{param}.input_audio.data"
        data = json_string(audio.data, where) if audio is not None else None
        fmt = audio.format if audio is not None else None
        mime = f"audio/{fmt.lower()}" if fmt else None
        b.media(Modality.AUDIO, where if data is not None else param, base64=data, mime=mime, uuid=part.uuid)
    elif kind == "file" or kind == "input_file":
        if kind == "input_file":
            file_part(part, param, b, part.uuid)
        elif part.file is None:
            raise RequestError(f"Missing '{param}.file'.", param=f"{param}.file")
        else:
            file_part(part.file, f"{param}.file", b, part.uuid)
    elif kind in _EMBEDS:
        raw = getattr(part, kind)
        b.media(Modality.EMBEDS, f"{param}.{kind}", base64=memoryview(raw), uuid=part.uuid)
    else:
        raise RequestError(f"Unsupported content part type {kind!r} at '{param}'.", param=f"{param}.type")


class FileFields(Protocol):
    """What a file reference carries, in chat's ``file`` object, on an ``input_file`` part (chat
    and Responses) alike."""

    file_data: msgspec.Raw
    file_id: str | None
    file_url: str | None


def file_part(ref: FileFields, base: str, b: PromptBuilder, uuid: str | int | None = None) -> None:
    """A document at JSON path ``base``: ``file_data`` as a data URI or bare base64 (a PDF), or a
    ``file_url`` / ``file_id`` naming one the gateway does not read (priced by default)."""
    where = f"{base}.file_data"
    data = json_string(ref.file_data, where)
    if data is not None:
        if bytes(data[:5]).lower() == b"data:":
            b.media(Modality.DOCUMENT, where, uri=data, uuid=uuid)
        else:
            b.media(Modality.DOCUMENT, where, base64=data, mime="application/pdf", uuid=uuid)
    elif ref.file_url:
        b.media(Modality.DOCUMENT, f"{base}.file_url", uri=memoryview(ref.file_url.encode()), uuid=uuid)
    elif ref.file_id:
        b.media(Modality.DOCUMENT, f"{base}.file_id", uuid=uuid if uuid is not None else ref.file_id)
    else:
        raise RequestError(f"'{base}' needs 'file_data' (a data URI), 'file_url' or 'file_id'.", param=where)
