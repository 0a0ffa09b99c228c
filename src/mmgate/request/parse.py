"""``parse_request``: one decode of a chat, completions or Anthropic messages body (the other
APIs' parsers, in :mod:`mmgate.request.apis`, are reached from here too).

The prompt is rendered in order into :attr:`RequestView.parts`. Chat turns start with a role
header (``<|user|>\\n``) and end with ``\\n``, the same for OpenAI and Anthropic bodies, so equal
conversation prefixes always give equal part sequences, which prefix-affinity routing relies on.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

import msgspec

from mmgate.errors import RequestError
from mmgate.request import bodies
from mmgate.request.assets import PromptBuilder
from mmgate.request.decode import CutMediaRef, decode_body, decode_chat, require_utf8
from mmgate.request.limits import DEFAULT_LIMITS, Limits
from mmgate.request.payload import json_string, unescape
from mmgate.request.view import Api, Modality, RequestView

_TEXT_TYPES = frozenset({"text", "input_text", "refusal"})
_URL_PARTS = {
    "image_url": Modality.IMAGE,
    "input_image": Modality.IMAGE,
    "video_url": Modality.VIDEO,
    "audio_url": Modality.AUDIO,
}
_EMBEDS = ("image_embeds", "audio_embeds", "video_embeds")
# The OpenAI and Anthropic APIs, whose specs require ``model``; vLLM's own routes (tokenize,
# pooling, score, ...) document it as optional (the served model), so they are not refused.
MODEL_REQUIRED = frozenset(
    {
        Api.CHAT,
        Api.COMPLETIONS,
        Api.MESSAGES,
        Api.RESPONSES,
        Api.EMBEDDINGS,
        Api.TRANSCRIPTIONS,
        Api.TRANSLATIONS,
    }
)


def role_header(role: str) -> str:
    """The text that opens a chat turn in :attr:`RequestView.parts`."""
    return f"<|{role}|>\n"


def parse_request(
    body: bytes,
    headers: Mapping[str, str],
    *,
    api: Api = Api.CHAT,
    limits: Limits | None = None,
) -> RequestView:
    """Understand a request body once; raises :class:`RequestError` for anything a client got wrong."""
    limits = limits or DEFAULT_LIMITS
    if len(body) > limits.max_body_bytes:
        raise RequestError(
            f"Request body is {len(body)} bytes; the limit is {limits.max_body_bytes} bytes.", status=413
        )
    builder = PromptBuilder(headers, limits)
    layout = None
    if api is Api.CHAT:
        try:
            chat, layout = decode_chat(body)  # skips the JSON scan of inline data URIs
        except msgspec.MsgspecError:
            chat = decode_body(bodies.CHAT, body)  # raises the client's error, worded as usual
        view = _chat(chat, builder)
    elif api is Api.COMPLETIONS:
        completions = decode_body(bodies.COMPLETIONS, body)
        require_utf8(body)  # decode_chat applies the same JSON rules to chat bodies
        view = _completions(completions, builder)
    elif api is Api.MESSAGES:
        messages = decode_body(bodies.MESSAGES, body)
        require_utf8(body)
        view = _messages(messages, builder)
    else:
        from mmgate.request.apis import parser_for  # the other APIs build on this module

        view = parser_for(api)(body, headers, api, builder)
    if limits.require_model and api in MODEL_REQUIRED and not view.model.strip():
        raise RequestError(
            "Missing required field 'model': name the model to run (GET /v1/models lists them).",
            param="model",
            code="missing_model",
        )
    view.body = body
    view.layout = layout
    view.unprobed_assets = builder.unprobed
    if builder.decoded_bytes:
        view.extra["decoded_bytes"] = builder.decoded_bytes
    return view


# --- OpenAI chat completions -------------------------------------------------------------------


_ROLE_HEADERS = {role: role_header(role) for role in ("system", "developer", "user", "assistant", "tool")}


def _chat(req: bodies.ChatBody, b: PromptBuilder) -> RequestView:
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
        header = _ROLE_HEADERS.get(msg.role) or role_header(msg.role)
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


# --- OpenAI completions ------------------------------------------------------------------------


def _completions(req: bodies.CompletionBody, b: PromptBuilder) -> RequestView:
    token_ids, count = render_prompt(req.prompt, "prompt", b)
    view = RequestView(
        api=Api.COMPLETIONS,
        model=req.model,
        parts=b.finish(),
        stream=bool(req.stream),
        max_tokens=req.max_tokens,
        cache_salt=req.cache_salt,
        prompt_token_ids=token_ids,
    )
    if count != 1:
        view.extra["prompt_count"] = count
    return view


def render_prompt(raw: msgspec.Raw, name: str, b: PromptBuilder) -> tuple[list[int] | None, int]:
    """A completions-style prompt (a string, strings, token ids or lists of them) into ``b``;
    returns its token ids when given as ids, and how many prompts it holds. ``name`` is its field
    (``prompt``; ``input`` in vLLM's pooling APIs)."""
    if not len(raw):
        raise RequestError(f"Missing required field '{name}'.", param=name)
    prompt = decode_body(bodies.PROMPT, bytes(raw), prefix=name)
    token_ids: list[int] | None = None
    count = 1
    if isinstance(prompt, str):
        b.text(prompt)
    elif all(isinstance(p, str) for p in prompt):  # a batch of prompts: one text part each
        for p in prompt:
            b.text(str(p))
            b.finish()
        count = len(prompt)
    elif all(isinstance(p, int) for p in prompt):
        token_ids = [int(p) for p in prompt if isinstance(p, int)]
    elif all(isinstance(p, list) for p in prompt):  # a batch of token-id prompts, concatenated
        token_ids = [t for p in prompt if isinstance(p, list) for t in p]
        count = len(prompt)
    else:
        raise RequestError(
            f"'{name}' must be a string, a list of strings, a list of token ids or a list of such lists.",
            param=name,
        )
    return token_ids, count


# --- Anthropic messages ------------------------------------------------------------------------


def _messages(req: bodies.MessagesBody, b: PromptBuilder) -> RequestView:
    if req.system is not None:
        b.text(role_header("system"))
        if isinstance(req.system, str):
            b.text(req.system)
        else:
            _blocks(req.system, "system", b)
        b.text("\n")
    for i, msg in enumerate(req.messages):
        b.text(role_header(msg.role))
        if isinstance(msg.content, str):
            b.text(msg.content)
        else:
            _blocks(msg.content, f"messages[{i}].content", b)
        b.text("\n")
    return RequestView(
        api=Api.MESSAGES,
        model=req.model,
        parts=b.finish(),
        stream=bool(req.stream),
        max_tokens=req.max_tokens,
    )


def _blocks(blocks: list[bodies.AnthropicBlock], param: str, b: PromptBuilder) -> None:
    for j, block in enumerate(blocks):
        where = f"{param}[{j}]"
        if block.type == "text":
            b.text(block.text or "")
        elif block.type == "image":
            _anthropic_media(block, where, b, Modality.IMAGE)
        elif block.type == "document":
            _anthropic_media(block, where, b, Modality.DOCUMENT)
        elif block.type == "tool_use":
            b.text(f"{block.name or ''}({bytes(block.input).decode('utf-8', 'replace')})")
        elif block.type == "tool_result":
            if isinstance(block.content, str):
                b.text(block.content)
            elif block.content is not None:
                _blocks(block.content, f"{where}.content", b)
        # other block types (thinking, redacted_thinking, ...) carry nothing the router prices


def _anthropic_media(block: bodies.AnthropicBlock, where: str, b: PromptBuilder, kind: Modality) -> None:
    """An ``image`` or ``document`` block: base64, URL or Files API id; a document may also carry
    plain text or content blocks, which are prompt text."""
    src = block.source
    if src is None:
        raise RequestError(f"Missing '{where}.source'.", param=f"{where}.source")
    if src.type == "base64":
        data = json_string(src.data, f"{where}.source.data")
        b.media(kind, f"{where}.source.data", base64=data, mime=src.media_type)
    elif src.type == "url":
        b.media(kind, f"{where}.source.url", uri=memoryview((src.url or "").encode()))
    elif src.type == "file":
        b.media(kind, f"{where}.source.file_id", uuid=src.file_id)
    elif src.type == "text" and kind is Modality.DOCUMENT:
        text = json_string(src.data, f"{where}.source.data")
        b.text(unescape(text).decode("utf-8", "replace") if text is not None else "")
    elif src.type == "content" and kind is Modality.DOCUMENT:
        if isinstance(src.content, str):
            b.text(src.content)
        elif src.content is not None:
            _blocks(src.content, f"{where}.source.content", b)
    else:
        raise RequestError(
            f"Unsupported {kind.value} source type {src.type!r}.", param=f"{where}.source.type"
        )
