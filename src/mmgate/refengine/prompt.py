"""An OpenAI chat request's messages as the engine runs them: template-ready turns and the images.

Each image is named by the identity the gateway gives it (:mod:`mmgate.request`): the part's
``uuid`` when the client (or the gateway's ``mediaUuids`` splice) wrote one, else the xxh3-128 of its
base64 text as sent. Using the gateway's own function, not a hash of the decoded pixels, is what
lets a router know which engine holds an image's features, and makes the engine's block keys and KV
events carry the identifiers the gateway's precise index computes.

URLs are refused: the engine never fetches anything (the gateway may be configured to; the engine
is not the place). Only inline ``data:`` images are read; anything else a chat part can carry that
this engine does not run (audio, video, files) is a 400 naming the part.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pybase64

from mmgate.errors import RequestError
from mmgate.request.payload import check_base64, identity_of, parse_data_uri

__all__ = ["ChatPrompt", "ImageInput", "prompt_from_messages"]

_ROLES = frozenset({"system", "developer", "user", "assistant", "tool"})


@dataclass(frozen=True, slots=True)
class ImageInput:
    """One image of a prompt: its identity, the encoded file (PNG, JPEG, ...) and where it was."""

    identity: str
    data: bytes
    param: str


@dataclass(frozen=True, slots=True)
class ChatPrompt:
    """Turns for the chat template (each image part reduced to ``{"type": "image"}``, which every
    vision-language template renders as its placeholder) and the images in prompt order."""

    messages: tuple[dict[str, Any], ...]
    images: tuple[ImageInput, ...] = ()


def prompt_from_messages(messages: Any) -> ChatPrompt:
    """Read a decoded ``messages`` array; raises :class:`RequestError` naming the field at fault."""
    if not isinstance(messages, list) or not messages:
        raise RequestError("'messages' must be a non-empty array.", param="messages")
    turns: list[dict[str, Any]] = []
    images: list[ImageInput] = []
    for i, message in enumerate(messages):
        param = f"messages[{i}]"
        if not isinstance(message, dict):
            raise RequestError(f"'{param}' must be an object.", param=param)
        role = message.get("role")
        if role not in _ROLES:
            raise RequestError(f"Invalid role at '{param}.role': {role!r}.", param=f"{param}.role")
        turns.append({"role": role, "content": _content(message.get("content"), f"{param}.content", images)})
    return ChatPrompt(tuple(turns), tuple(images))


def _content(content: Any, param: str, images: list[ImageInput]) -> str | list[dict[str, Any]]:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise RequestError(f"'{param}' must be a string or an array of parts.", param=param)
    parts: list[dict[str, Any]] = []
    for j, part in enumerate(content):
        where = f"{param}[{j}]"
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text" and isinstance(part.get("text"), str):
            parts.append({"type": "text", "text": part["text"]})
        elif kind == "image_url" and isinstance(part, dict):
            images.append(_image(part, where))
            parts.append({"type": "image"})
        else:
            raise RequestError(
                f"Unsupported content part at '{where}': this engine reads text and inline image_url parts.",
                param=where,
            )
    return parts


def _image(part: dict[str, Any], param: str) -> ImageInput:
    value = part.get("image_url")
    url = value.get("url") if isinstance(value, dict) else value
    where = f"{param}.image_url.url" if isinstance(value, dict) else f"{param}.image_url"
    if not isinstance(url, str) or not url:
        raise RequestError(f"Missing image URL at '{where}'.", param=where)
    if url[:5].lower() != "data:":
        raise RequestError(
            f"The engine does not fetch URLs ('{where}'): send the image inline as a base64 data: URI.",
            param=where,
        )
    payload = check_base64(parse_data_uri(memoryview(url.encode()), where).payload, where)
    uuid = part.get("uuid")
    identity = (
        str(uuid) if isinstance(uuid, str | int) and not isinstance(uuid, bool) else identity_of(payload)
    )
    return ImageInput(identity, pybase64.b64decode(payload, validate=True), where)
