"""The request bodies as the gateway reads them: msgspec structs holding only the fields it uses.

Each API's body is decoded once into these structs (the "skeleton" of the body: unknown fields
are skipped by the decoder, never materialised). Media payloads are
:class:`msgspec.Raw`, a view into the original body, so a 2 MB base64 string is not copied.
"""

from __future__ import annotations

import msgspec

_ABSENT = msgspec.Raw()


class MediaRef(msgspec.Struct):
    """``{"url": ..., "detail": ...}`` of image_url / video_url / audio_url parts."""

    url: msgspec.Raw = _ABSENT
    detail: str | None = None


class InputAudio(msgspec.Struct):
    data: msgspec.Raw = _ABSENT
    format: str | None = None


class FileRef(msgspec.Struct):
    """``{"file_data": "data:application/pdf;base64,...", "file_id": ..., "filename": ...}`` of a
    chat ``file`` part (OpenAI); ``input_file`` parts carry the same fields beside ``type``."""

    file_data: msgspec.Raw = _ABSENT
    file_id: str | None = None
    file_url: str | None = None
    filename: str | None = None


class ChatPart(msgspec.Struct):
    type: str | None = None
    text: str | None = None
    refusal: str | None = None
    image_url: MediaRef | str | None = None
    video_url: MediaRef | str | None = None
    audio_url: MediaRef | str | None = None
    input_audio: InputAudio | None = None
    image_embeds: msgspec.Raw = _ABSENT
    audio_embeds: msgspec.Raw = _ABSENT
    video_embeds: msgspec.Raw = _ABSENT
    detail: str | None = None  # input_image carries it beside image_url
    uuid: str | int | None = None
    file: FileRef | None = None
    file_data: msgspec.Raw = _ABSENT  # input_file: the FileRef fields sit on the part itself
    file_id: str | None = None
    file_url: str | None = None
    filename: str | None = None


class ToolFunction(msgspec.Struct):
    name: str = ""
    arguments: str = ""


class ToolCall(msgspec.Struct):
    function: ToolFunction | None = None


class ChatMessage(msgspec.Struct):
    role: str
    content: str | list[ChatPart] | None = None
    tool_calls: list[ToolCall] | None = None


class ChatBody(msgspec.Struct):
    messages: list[ChatMessage]
    model: str = ""
    stream: bool | None = None
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    cache_salt: str | None = None


class CompletionBody(msgspec.Struct):
    prompt: msgspec.Raw = _ABSENT
    model: str = ""
    stream: bool | None = None
    max_tokens: int | None = None
    cache_salt: str | None = None


class AnthropicSource(msgspec.Struct):
    type: str
    media_type: str | None = None
    data: msgspec.Raw = _ABSENT
    url: str | None = None
    file_id: str | None = None
    content: str | list[AnthropicBlock] | None = None  # document source of type "content"


class AnthropicBlock(msgspec.Struct):
    type: str
    text: str | None = None
    source: AnthropicSource | None = None
    content: str | list[AnthropicBlock] | None = None  # tool_result
    name: str | None = None  # tool_use
    input: msgspec.Raw = _ABSENT  # tool_use arguments, rendered as their JSON text


class AnthropicMessage(msgspec.Struct):
    role: str
    content: str | list[AnthropicBlock]


class MessagesBody(msgspec.Struct):
    messages: list[AnthropicMessage]
    model: str = ""
    system: str | list[AnthropicBlock] | None = None
    stream: bool | None = None
    max_tokens: int | None = None


CHAT = msgspec.json.Decoder(ChatBody)
COMPLETIONS = msgspec.json.Decoder(CompletionBody)
MESSAGES = msgspec.json.Decoder(MessagesBody)
PROMPT = msgspec.json.Decoder(str | list[str | int | list[int]])
