"""Anthropic messages: system text and content blocks, rendered as chat turns are."""

from __future__ import annotations

from mmgate.errors import RequestError
from mmgate.request import bodies
from mmgate.request.apis.chat import role_header
from mmgate.request.assets import PromptBuilder
from mmgate.request.payload import json_string, unescape
from mmgate.request.view import Api, Modality, RequestView


def parse_messages(req: bodies.MessagesBody, b: PromptBuilder) -> RequestView:
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
