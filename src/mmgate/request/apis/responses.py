"""``/v1/responses``: the OpenAI Responses API, read like chat.

``input`` is a string (one user turn) or a list of items. A message item has a ``role`` and a
``content`` that is a string or a list of parts: ``input_text`` / ``output_text``, ``input_image``
(``image_url`` is a URL or a data URI *string*, not chat's object; or a ``file_id``), and
``input_file`` (``file_data`` as a data URI, ``file_url`` or ``file_id``). Function calls and their
outputs are text the model reads. ``instructions`` is the system turn. Turns render with the same
role headers as chat, so a conversation sent to either API has the same prefix.
"""

from __future__ import annotations

from collections.abc import Mapping

import msgspec

from mmgate.errors import RequestError
from mmgate.request.apis.chat import file_part, role_header
from mmgate.request.assets import PromptBuilder
from mmgate.request.decode import decode_body, require_utf8
from mmgate.request.payload import json_string
from mmgate.request.view import Api, Modality, RequestView

_ABSENT = msgspec.Raw()
_TEXT_PARTS = frozenset({"input_text", "output_text", "text", "summary_text", "reasoning_text", "refusal"})


class ResponsesPart(msgspec.Struct):
    type: str
    text: str | None = None
    refusal: str | None = None
    image_url: msgspec.Raw = _ABSENT  # a string: kept as a view of the body (data URIs are large)
    file_id: str | None = None
    detail: str | None = None
    file_data: msgspec.Raw = _ABSENT
    file_url: str | None = None
    filename: str | None = None


class ResponsesItem(msgspec.Struct):
    type: str | None = None  # "message" when absent
    role: str | None = None
    content: str | list[ResponsesPart] | None = None
    name: str | None = None  # function_call
    arguments: str | None = None  # function_call
    output: str | list[ResponsesPart] | None = None  # function_call_output
    summary: list[ResponsesPart] | None = None  # reasoning


class ResponsesBody(msgspec.Struct):
    input: str | list[ResponsesItem] | None = None
    model: str = ""
    instructions: str | None = None
    stream: bool | None = None
    max_output_tokens: int | None = None
    cache_salt: str | None = None


_DECODER = msgspec.json.Decoder(ResponsesBody)


def parse_responses(body: bytes, _headers: Mapping[str, str], _api: Api, b: PromptBuilder) -> RequestView:
    req = decode_body(_DECODER, body)
    require_utf8(body)
    if req.input is None:
        raise RequestError("Missing required field 'input'.", param="input")
    if req.instructions:
        b.text(role_header("system") + req.instructions + "\n")
    if isinstance(req.input, str):
        b.text(role_header("user") + req.input + "\n")
    else:
        for i, item in enumerate(req.input):
            _item(item, f"input[{i}]", b)
    return RequestView(
        api=Api.RESPONSES,
        model=req.model,
        parts=b.finish(),
        stream=bool(req.stream),
        max_tokens=req.max_output_tokens,
        cache_salt=req.cache_salt,
    )


def _item(item: ResponsesItem, param: str, b: PromptBuilder) -> None:
    kind = item.type or "message"
    if kind == "message":
        if item.role is None:
            raise RequestError(f"Missing required field '{param}.role'.", param=f"{param}.role")
        b.text(role_header(item.role))
        _content(item.content, f"{param}.content", b)
        b.text("\n")
    elif kind == "function_call":
        b.text(role_header("assistant") + f"{item.name or ''}({item.arguments or ''})\n")
    elif kind == "function_call_output":
        b.text(role_header("tool"))
        _content(item.output, f"{param}.output", b)
        b.text("\n")
    elif kind == "reasoning":
        _content(item.summary, f"{param}.summary", b)
    # other item types (item_reference, tool calls of hosted tools) carry no prompt text here


def _content(content: str | list[ResponsesPart] | None, param: str, b: PromptBuilder) -> None:
    if isinstance(content, str):
        b.text(content)
        return
    for j, part in enumerate(content or ()):
        where = f"{param}[{j}]"
        if part.type in _TEXT_PARTS:
            text = part.refusal if part.type == "refusal" else part.text
            if text is None:
                field = "refusal" if part.type == "refusal" else "text"
                raise RequestError(f"Missing '{where}.{field}'.", param=f"{where}.{field}")
            b.text(text)
        elif part.type == "input_image":
            uri = json_string(part.image_url, f"{where}.image_url")
            if uri is None and part.file_id is None:
                raise RequestError(
                    f"'{where}' needs an 'image_url' (a URL or data URI) or a 'file_id'.",
                    param=f"{where}.image_url",
                )
            at = f"{where}.image_url" if uri is not None else f"{where}.file_id"
            b.media(Modality.IMAGE, at, uri=uri, uuid=part.file_id, detail=part.detail)
        elif part.type == "input_file":
            _file(part, where, b)
        else:
            raise RequestError(
                f"Unsupported content part type {part.type!r} at '{where}'.", param=f"{where}.type"
            )


def _file(part: ResponsesPart, where: str, b: PromptBuilder) -> None:
    """A file the model reads (a PDF): a document asset, priced per page where the served model
    takes documents (docs/tokens.md "Documents"); its file name is text the model sees."""
    file_part(part, where, b)
    if part.filename:
        b.text(part.filename)
