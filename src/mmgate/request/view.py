"""What the gateway knows about one request after parsing it once.

These types are the contract between request understanding (``mmgate.request``), pricing
(``mmgate.tokens``), the scheduler (``mmgate.scheduling``), the simulator and the benchmarks.
They hold no I/O and no reference to the HTTP layer.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

import msgspec

from mmgate.request.layout import ChatLayout
from mmgate.request.pieces import Body


class Modality(StrEnum):
    IMAGE = "image"
    VIDEO = "video"
    AUDIO = "audio"
    EMBEDS = "embeds"  # precomputed embeddings (image_embeds): no encoder work
    DOCUMENT = "document"  # a PDF (Anthropic document blocks, OpenAI file / input_file parts)


class Source(StrEnum):
    INLINE = "inline"  # bytes in the body (data: URI, base64 block, input_audio)
    URL = "url"  # a reference the gateway does not fetch
    UUID = "uuid"  # only the client's uuid, no payload (vLLM's cached-item form)


class Api(StrEnum):
    """The request shapes the gateway reads (each served at the path vLLM serves it at)."""

    CHAT = "chat"  # /v1/chat/completions
    COMPLETIONS = "completions"  # /v1/completions
    MESSAGES = "messages"  # /v1/messages (Anthropic)
    RESPONSES = "responses"  # /v1/responses (OpenAI Responses API)
    EMBEDDINGS = "embeddings"  # /v1/embeddings
    POOLING = "pooling"  # /pooling
    CLASSIFY = "classify"  # /classify
    SCORE = "score"  # /score, /v1/score
    RERANK = "rerank"  # /rerank, /v1/rerank, /v2/rerank
    TOKENIZE = "tokenize"  # /tokenize
    DETOKENIZE = "detokenize"  # /detokenize
    TRANSCRIPTIONS = "transcriptions"  # /v1/audio/transcriptions (multipart/form-data)
    TRANSLATIONS = "translations"  # /v1/audio/translations (multipart/form-data)

    @property
    def generates(self) -> bool:
        """Whether the model server decodes an answer (pooling and tokenizer APIs do not)."""
        return self in _GENERATING


_GENERATING = frozenset(
    {Api.CHAT, Api.COMPLETIONS, Api.MESSAGES, Api.RESPONSES, Api.TRANSCRIPTIONS, Api.TRANSLATIONS}
)

API_PATHS: dict[str, Api] = {
    "/v1/chat/completions": Api.CHAT,
    "/v1/completions": Api.COMPLETIONS,
    "/v1/messages": Api.MESSAGES,
    "/v1/responses": Api.RESPONSES,
    "/v1/embeddings": Api.EMBEDDINGS,
    "/pooling": Api.POOLING,
    "/classify": Api.CLASSIFY,
    "/score": Api.SCORE,
    "/v1/score": Api.SCORE,
    "/rerank": Api.RERANK,
    "/v1/rerank": Api.RERANK,
    "/v2/rerank": Api.RERANK,
    "/tokenize": Api.TOKENIZE,
    "/detokenize": Api.DETOKENIZE,
    "/v1/audio/transcriptions": Api.TRANSCRIPTIONS,
    "/v1/audio/translations": Api.TRANSLATIONS,
}
"""The POST paths vLLM serves each API at (rerank at three, score at two, as vLLM's server does)."""


@dataclass(slots=True)
class MediaAsset:
    """One media item of a request.

    ``identity`` is the part's ``uuid`` when given, otherwise the xxh3-128 hex digest of the payload
    as sent (the base64 text of a data URI, the URL string of a reference). It is the key of every
    media-aware cache in mmgate and is the same on every replica and for every pod.
    Dimensions are ``None`` when not applicable or not probed; ``probed`` says whether they came
    from the media itself (or request headers) rather than a configured default applied later.
    """

    modality: Modality
    source: Source
    identity: str
    field: str  # JSON path of the part, e.g. "messages[0].content[1]"
    mime: str | None = None  # as declared by the client (data URI media type, input_audio format)
    detected_format: str | None = None  # what the bytes are, by content ("png", "mp4", "wav", ...)
    width: int | None = None
    height: int | None = None
    duration_s: float | None = None
    fps: float | None = None
    sample_rate: int | None = None
    channels: int | None = None
    probed: bool = False
    payload_size: int = 0  # bytes of the payload as sent (base64 text length for inline media)
    url: str | None = None  # for Source.URL only; never fetched by the parser
    detail: str | None = None  # OpenAI image "detail" when given
    pages: int | None = None  # documents: pages counted from the PDF's page tree
    text_bytes: int | None = None  # documents: UTF-8 bytes of the text layer, when extracted (CLI)
    client_uuid: bool = False  # ``identity`` is the client's own uuid (or file id), not a content hash


class RequestView(msgspec.Struct):
    """A request as the gateway reads it.

    ``parts`` is the prompt in order: ``str`` for text (chat turns rendered with a role header so
    equal prefixes give equal sequences) and :class:`MediaAsset` for media, so prefix matching sees
    media where it stands relative to the text. ``body`` is what is forwarded: the original bytes,
    or (once the gateway wrote media uuids) :class:`~mmgate.request.pieces.BodyPieces` of them;
    ``layout`` is where its chat parts sit, when the parse walked it (large chat bodies), so a
    later step that needs offsets into ``body`` does not walk it again.

    A msgspec struct, as one is made for every request: its fields are filled in C (``extra`` a
    fresh dict each time) rather than by a generated Python ``__init__``.
    """

    api: Api
    model: str
    parts: list[str | MediaAsset]
    body: Body = b""
    stream: bool = False
    max_tokens: int | None = None
    cache_salt: str | None = None
    prompt_token_ids: list[int] | None = None  # completions with token-id prompts
    unprobed_assets: int = 0
    extra: dict[str, object] = {}
    layout: ChatLayout | None = None

    @property
    def first_byte_ends_prefill(self) -> bool:
        """Whether the answer's first byte comes when prefill ends, so the time to it is the
        TTFT: a streamed answer, or an API that generates nothing. A non-streamed answer's first
        byte is its last."""
        return self.stream or not self.api.generates

    @property
    def assets(self) -> list[MediaAsset]:
        """Media items in prompt order (repeats included; identity tells them apart)."""
        return [p for p in self.parts if isinstance(p, MediaAsset)]

    @property
    def media_counts(self) -> dict[str, int]:
        """Media items per modality (``{"image": 2}``), for logs and traces."""
        counts: dict[str, int] = {}
        for part in self.parts:
            if isinstance(part, MediaAsset):
                counts[part.modality.value] = counts.get(part.modality.value, 0) + 1
        return counts

    @property
    def texts(self) -> list[str]:
        return [p for p in self.parts if isinstance(p, str)]

    @property
    def text_bytes(self) -> int:
        return sum(len(t.encode()) for t in self.texts)
