"""A chat body as vLLM hands it to the chat template (``vllm/entrypoints/chat_utils.py``).

vLLM does not give a template the client's messages verbatim. Per message:

* in the "openai" content format (the template loops over content parts) every content becomes a
  list: a string is one ``{"type": "text", "text": ...}`` part, text-like parts (``text``,
  ``input_text``, ``output_text``, ``refusal``, ``thinking``) become text parts, and each media
  part becomes ``{"type": "image" | "video" | "audio"}`` (embeddings count as their modality);
* in the "string" format the texts are joined with ``"\\n"`` and each media item's placeholder
  string (:mod:`~mmgate.tokens.exact.placeholders`) is put in front, grouped by placeholder;
* a ``tool`` message whose parts are all text gets them joined into one string; its
  ``tool_call_id`` is kept, as are ``name`` and ``task`` on any message and ``tools`` on a
  ``developer`` one; an assistant's ``tool_calls`` keep their shape with ``arguments`` parsed from
  JSON (``{}`` when it is not JSON; an empty list is dropped), and ``reasoning`` is given also as
  ``reasoning_content``.

The request-level variables are ``tools`` (each as vLLM's models dump it: ``type``,
``function: {name, description, parameters}``, other fields after), ``documents``,
``add_generation_prompt`` (default true), ``continue_final_message`` and
``chat_template_kwargs``. The body was validated by :func:`~mmgate.request.parse_request`
already; inline data URIs are cut out before decoding (:func:`~mmgate.request.decode.cut_data_urls`)
so megabytes of base64 are never turned into Python strings here.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import msgspec

from mmgate.request.decode import MIN_BODY, cut_data_urls
from mmgate.request.view import Modality
from mmgate.tokens.exact.placeholders import Placeholder
from mmgate.tokens.exact.template import ContentFormat


class Unsupported(ValueError):
    """The body holds something the engine-exact layout does not model (a file part, a modality
    the family has no placeholder for, a shape vLLM itself would refuse)."""


_TEXT = {
    "text": "text",
    "input_text": "text",
    "output_text": "text",
    "refusal": "refusal",
    "thinking": "thinking",
}
_MEDIA_BY_TYPE = {
    "image_url": Modality.IMAGE,
    "input_image": Modality.IMAGE,
    "image_embeds": Modality.IMAGE,
    "image_pil": Modality.IMAGE,
    "video_url": Modality.VIDEO,
    "audio_url": Modality.AUDIO,
    "input_audio": Modality.AUDIO,
    "audio_embeds": Modality.AUDIO,
}
# Type-less parts (or parts with a uuid) are recognised by their field, in vLLM's order.
_MEDIA_FIELDS = (
    "image_url",
    "image_pil",
    "image_embeds",
    "audio_embeds",
    "audio_url",
    "input_audio",
    "video_url",
)


@dataclass(slots=True)
class Conversation:
    """What the template is rendered with, and the media parts in prompt order."""

    messages: list[dict[str, Any]]
    media: list[Modality]
    tools: list[Any] | None = None
    documents: list[Any] | None = None
    add_generation_prompt: bool = True
    continue_final_message: bool = False
    add_special_tokens: bool = False  # vLLM's chat default: the template writes BOS itself
    kwargs: dict[str, Any] = field(default_factory=dict)


def _decode(body: bytes) -> dict[str, Any]:
    cut = cut_data_urls(body) if len(body) >= MIN_BODY else None
    try:
        doc = msgspec.json.decode(cut[0] if cut is not None else body)
    except msgspec.DecodeError as exc:
        raise Unsupported(f"body is not JSON: {exc}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("messages"), list):
        raise Unsupported("a chat body has a 'messages' list")
    return doc


def _part(part: Any) -> tuple[str, Any]:
    """(kind, value): kind is "text", or a media modality's value, per vLLM's part rules."""
    if isinstance(part, str):
        return "text", part
    if not isinstance(part, dict):
        raise Unsupported("a content part is an object")
    kind = part.get("type")
    if isinstance(kind, str) and part.get("uuid") is None:
        if kind in _TEXT:
            return "text", part.get(_TEXT[kind])
        if kind in _MEDIA_BY_TYPE:
            return _MEDIA_BY_TYPE[kind].value, None
    if kind is None or part.get("uuid") is not None:
        for name in _MEDIA_FIELDS:
            if name in part and (name != "input_audio" or part[name] is not None):
                return _MEDIA_BY_TYPE[name].value, None
        if kind is None:
            raise Unsupported("a content part has no type")
        if kind in _TEXT:
            return "text", part.get(_TEXT[kind])
    raise Unsupported(f"content part type {kind!r} is not laid out engine-exactly")


def _content(
    content: Any, fmt: ContentFormat, placeholders: dict[Modality, Placeholder], media: list[Modality]
) -> str | list[dict[str, Any]]:
    parts = [] if content is None else [content] if isinstance(content, str) else content
    if not isinstance(parts, list):
        raise Unsupported("message content is a string or a list of parts")
    wrapped: list[dict[str, Any]] = []
    texts: list[str] = []
    strings: list[str] = []
    for part in parts:
        kind, value = _part(part)
        if kind == "text":
            if value is None:  # vLLM skips a text part without text
                continue
            if not isinstance(value, str):
                raise Unsupported("text parts hold strings")
            wrapped.append({"type": "text", "text": value})
            texts.append(value)
            continue
        modality = Modality(kind)
        media.append(modality)
        wrapped.append({"type": modality.value})
        if fmt == "string":
            holder = placeholders.get(modality)
            if holder is None:
                raise Unsupported(f"no {modality.value} placeholder for this model family")
            strings.append(holder.string)
    if fmt == "openai":
        return wrapped
    text = "\n".join(texts)
    if not strings:
        return text
    grouped = [s for s, n in Counter(strings).items() for _ in range(n)]
    return "\n".join([*grouped, text] if text else grouped)


def _tool_calls(calls: Any) -> list[Any] | None:
    if not isinstance(calls, list) or not calls:
        return None
    out = []
    for call in calls:
        if isinstance(call, dict) and isinstance(call.get("function"), dict):
            function = dict(call["function"])
            arguments = function.get("arguments")
            if isinstance(arguments, str):
                try:
                    function["arguments"] = json.loads(arguments)
                except (ValueError, RecursionError):  # vLLM: anything not JSON becomes {}
                    function["arguments"] = {}
            elif not isinstance(arguments, dict | list):
                function["arguments"] = {}
            call = {**call, "function": function}
        out.append(call)
    return out


def _message(
    msg: Any, fmt: ContentFormat, placeholders: dict[Modality, Placeholder], media: list[Modality]
) -> dict[str, Any]:
    if not isinstance(msg, dict) or not isinstance(msg.get("role"), str):
        raise Unsupported("a message is an object with a role")
    role = msg["role"]
    out: dict[str, Any] = {"role": role, "content": _content(msg.get("content"), fmt, placeholders, media)}
    if role == "assistant":
        calls = _tool_calls(msg.get("tool_calls"))
        if calls is not None:
            out["tool_calls"] = calls
        if msg.get("reasoning") is not None:
            out["reasoning"] = out["reasoning_content"] = msg["reasoning"]
    elif role == "tool":
        if "tool_call_id" in msg:
            out["tool_call_id"] = msg["tool_call_id"]
        content = out["content"]
        if isinstance(content, list) and all(p.get("type") == "text" for p in content):
            out["content"] = "\n".join(p["text"] for p in content)
    for key in ("name", "task"):
        if isinstance(msg.get(key), str):
            out[key] = msg[key]
    if role == "developer":
        out["tools"] = msg.get("tools")
    return out


def _tool(tool: Any) -> Any:
    """A tool as vLLM's pydantic model dumps it: declared fields first (defaults filled), then extras."""
    if not isinstance(tool, dict) or not isinstance(tool.get("function"), dict):
        return tool
    fn = tool["function"]
    function = {
        "name": fn.get("name"),
        "description": fn.get("description"),
        "parameters": fn.get("parameters"),
    }
    function.update((k, v) for k, v in fn.items() if k not in function)
    dumped = {"type": tool.get("type", "function"), "function": function}
    dumped.update((k, v) for k, v in tool.items() if k not in dumped)
    return dumped


def conversation(body: bytes, fmt: ContentFormat, placeholders: dict[Modality, Placeholder]) -> Conversation:
    """The template's inputs for a chat body; raises :class:`Unsupported` for what is not modelled."""
    doc = _decode(body)
    media: list[Modality] = []
    messages = [_message(m, fmt, placeholders, media) for m in doc["messages"]]
    tools = doc.get("tools")
    kwargs = doc.get("chat_template_kwargs")
    return Conversation(
        messages,
        media,
        tools=[_tool(t) for t in tools] if isinstance(tools, list) else None,
        documents=doc.get("documents") if isinstance(doc.get("documents"), list) else None,
        add_generation_prompt=doc.get("add_generation_prompt", True) is not False,
        continue_final_message=doc.get("continue_final_message") is True,
        add_special_tokens=doc.get("add_special_tokens") is True,
        kwargs=kwargs if isinstance(kwargs, dict) else {},
    )
