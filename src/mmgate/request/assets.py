"""Turning media parts into :class:`MediaAsset` s: identity, probing, request headers, limits.

:class:`PromptBuilder` collects the prompt in order. Text pieces are merged so that the same
conversation always renders to the same strings; each media part becomes an asset where it stands.
A repeated payload is recognised by its identity and reuses the first probe instead of redoing it.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping

from mmgate.errors import RequestError
from mmgate.request.limits import Limits
from mmgate.request.media_uuids import check_client_uuid
from mmgate.request.payload import Buffer, check_base64, identity_of, parse_data_uri, unescape
from mmgate.request.probe import (
    AUDIO_FORMATS,
    DOCUMENT_FORMATS,
    IMAGE_FORMATS,
    VIDEO_FORMATS,
    Base64Reader,
    BytesReader,
    probe,
)
from mmgate.request.probe.result import ProbeResult
from mmgate.request.view import MediaAsset, Modality, Source

# Which sniffed formats count as probed for a part of each modality (an MP4/WebM may carry audio).
_FORMATS_FOR = {
    Modality.IMAGE: IMAGE_FORMATS,
    Modality.VIDEO: VIDEO_FORMATS,
    Modality.AUDIO: AUDIO_FORMATS | VIDEO_FORMATS,
    Modality.DOCUMENT: DOCUMENT_FORMATS,
}
_MIME_PREFIX = {
    Modality.IMAGE: "image/",
    Modality.VIDEO: "video/",
    Modality.AUDIO: "audio/",
    Modality.DOCUMENT: "application/pdf",
}

_ARTICLE = {Modality.IMAGE: "an", Modality.VIDEO: "a", Modality.AUDIO: "an", Modality.DOCUMENT: "a"}

VIDEO_FPS = "x-llm-d-video-fps"
VIDEO_DURATION = "x-llm-d-video-duration-seconds"
VIDEO_RESOLUTION = "x-llm-d-video-resolution"
AUDIO_DURATION = "x-llm-d-audio-duration-seconds"
HINT_HEADERS = (VIDEO_FPS, VIDEO_DURATION, VIDEO_RESOLUTION, AUDIO_DURATION)
"""llm-d's media hint headers: what a request's video and audio weigh when the body cannot say."""


@dataclasses.dataclass(frozen=True, slots=True)
class Hints:
    """What llm-d's request headers declare about the request's videos and audio."""

    video_fps: float | None = None
    video_duration_s: float | None = None
    video_size: tuple[int, int] | None = None
    audio_duration_s: float | None = None


def read_hints(headers: Mapping[str, str], limits: Limits) -> Hints:
    """Parse the ``x-llm-d-*`` media headers (case-insensitive names); malformed values are 400s."""
    found: dict[str, str] = {}
    for key, value in headers.items():
        low = key.lower()
        if low in HINT_HEADERS:
            found[low] = value.strip()
    if not found:
        return Hints()
    size = None
    if VIDEO_RESOLUTION in found:
        w, sep, h = found[VIDEO_RESOLUTION].lower().partition("x")
        if not (sep and w.strip().isdigit() and h.strip().isdigit() and int(w) > 0 and int(h) > 0):
            raise RequestError(
                f"Header {VIDEO_RESOLUTION} must be WIDTHxHEIGHT, got {found[VIDEO_RESOLUTION]!r}.",
                param=VIDEO_RESOLUTION,
            )
        size = (int(w), int(h))
        check_size(size[0], size[1], limits, VIDEO_RESOLUTION, f"Header {VIDEO_RESOLUTION} declares")
    return Hints(
        video_fps=_positive(found, VIDEO_FPS, math.inf),
        video_duration_s=_positive(found, VIDEO_DURATION, limits.max_duration_s),
        video_size=size,
        audio_duration_s=_positive(found, AUDIO_DURATION, limits.max_duration_s),
    )


def _positive(found: dict[str, str], name: str, limit: float) -> float | None:
    if name not in found:
        return None
    try:
        value = float(found[name])
    except ValueError:
        value = math.nan
    if not (value > 0 and math.isfinite(value)):
        raise RequestError(f"Header {name} must be a positive number, got {found[name]!r}.", param=name)
    if value > limit:
        raise RequestError(f"Header {name} declares {value:g} s; the limit is {limit:g} s.", param=name)
    return value


def check_size(width: int, height: int, limits: Limits, param: str, claim: str) -> None:
    """Refuse dimensions beyond the limits (a decompression bomb or a lying header)."""
    side = max(width, height)
    if side > limits.max_dimension or width * height > limits.max_pixels:
        raise RequestError(
            f"{claim} {width}x{height} pixels; the limit is "
            f"{limits.max_dimension} pixels per side and {limits.max_pixels} pixels in total.",
            param=param,
        )


class PromptBuilder:
    """Accumulates the prompt in order: merged text strings and media assets."""

    def __init__(self, headers: Mapping[str, str], limits: Limits) -> None:
        self.parts: list[str | MediaAsset] = []
        self.unprobed = 0
        self.decoded_bytes = 0  # base64 bytes decoded by probing, over all assets
        self._text: list[str] = []
        self._headers = headers
        self._hints: Hints | None = None
        self._limits = limits
        self._seen: dict[str, MediaAsset] = {}
        self._count = 0

    def text(self, piece: str) -> None:
        if piece:
            self._text.append(piece)

    def finish(self) -> list[str | MediaAsset]:
        self._flush()
        return self.parts

    def _flush(self) -> None:
        if self._text:
            self.parts.append("".join(self._text))
            self._text.clear()

    def media(
        self,
        modality: Modality,
        param: str,
        *,
        uri: memoryview | None = None,
        base64: memoryview | None = None,
        mime: str | None = None,
        uuid: str | int | None = None,
        detail: str | None = None,
        known: str | None = None,
        raw: memoryview | None = None,
    ) -> None:
        """Add one media part. ``uri`` is a data: URI or URL; ``base64`` a bare base64 payload;
        ``raw`` the file's own bytes (a multipart upload), probed as they are.

        ``known`` is the identity of a payload already known to be standard base64 (the data-URI
        cut of large chat bodies validates and hashes it), so it is neither validated nor hashed
        twice."""
        self._count += 1
        if self._count > self._limits.max_assets:
            raise RequestError(
                f"Too many media items: at most {self._limits.max_assets} per request.", param=param
            )
        payload, url, mime = self._resolve(param, uri, raw if raw is not None else base64, mime)
        if payload is None and url is None and uuid is None:
            raise RequestError(f"Missing media payload at '{param}'.", param=param)
        probe_me = payload is not None and modality is not Modality.EMBEDS
        if probe_me:
            self._check_mime(modality, mime, param)
        source = Source.INLINE if payload is not None else Source.URL if url is not None else Source.UUID
        if uuid is not None:
            identity = str(uuid)
        elif known is not None and payload is not None:
            identity = known
        else:
            identity = identity_of(payload if payload is not None else url or "")
        self._flush()
        first = self._seen.get(identity)
        if (
            first is None
            and probe_me
            and payload is not None
            and self._limits.validate_base64
            and known is None
            and raw is None
        ):
            view = memoryview(payload)
            clean = check_base64(view, param)
            if clean is not view:  # escaped or wrapped text: identify the normalised payload
                payload = clean
                identity = str(uuid) if uuid is not None else identity_of(payload)
                first = self._seen.get(identity)
        if uuid is not None and self._limits.own_media_uuids:
            check_client_uuid(str(uuid), payload if payload is not None else url, param, known)
        if first is not None:  # a repeat: same asset, already validated and probed
            self.parts.append(
                dataclasses.replace(first, field=param, detail=detail, client_uuid=uuid is not None)
            )
            self.unprobed += not first.probed and modality is not Modality.EMBEDS
            return
        asset = MediaAsset(
            modality=modality,
            source=source,
            identity=identity,
            field=param,
            mime=mime,
            payload_size=len(payload) if payload is not None else len(url or ""),
            url=url,
            detail=detail,
            client_uuid=uuid is not None,
        )
        if probe_me and payload is not None:
            self._probe(asset, Base64Reader(payload) if raw is None else BytesReader(payload), param)
        if modality in (Modality.VIDEO, Modality.AUDIO):
            self._apply_hints(asset)
        asset.probed = _complete(asset)
        self.unprobed += not asset.probed and modality is not Modality.EMBEDS
        self._seen[identity] = asset
        self.parts.append(asset)

    def _resolve(
        self, param: str, uri: memoryview | None, base64: memoryview | None, mime: str | None
    ) -> tuple[Buffer | None, str | None, str | None]:
        """(inline base64 payload, URL, mime) of a part: a data: URI splits into mime + payload."""
        if uri is not None and len(uri):
            if bytes(uri[:5]).lower() != b"data:":
                return None, self._url(uri, param), mime
            data = parse_data_uri(uri, param)
            return (data.payload if len(data.payload) else None), None, data.mime
        return (base64 if base64 is not None and len(base64) else None), None, mime

    def _url(self, uri: memoryview, param: str) -> str:
        url = unescape(uri).decode("utf-8", "replace")
        scheme = url.partition(":")[0].lower()
        if scheme not in self._limits.url_schemes:
            allowed = ", ".join(sorted(self._limits.url_schemes))
            raise RequestError(
                f"Unsupported URL scheme {scheme + ':'!r} in '{param}'; use a base64 data: URI or {allowed}.",
                param=param,
            )
        return url

    def _check_mime(self, modality: Modality, mime: str | None, param: str) -> None:
        if mime is None or mime.startswith(_MIME_PREFIX[modality]) or mime == "application/octet-stream":
            return
        raise RequestError(
            f"Unsupported media type {mime!r} for {_ARTICLE[modality]} {modality.value} part at '{param}'; "
            f"expected {_MIME_PREFIX[modality]}{'' if modality is Modality.DOCUMENT else '*'}.",
            param=param,
        )

    def _probe(self, asset: MediaAsset, reader: Base64Reader | BytesReader, param: str) -> None:
        fmt, result = probe(reader)
        if isinstance(reader, Base64Reader):
            self.decoded_bytes += reader.decoded
        asset.detected_format = fmt
        if fmt not in _FORMATS_FOR[asset.modality]:
            if self._limits.check_media_content:
                raise _not_media(asset.modality, fmt, param)
            return
        if result is None:  # a known header, truncated or corrupt past the sniffed bytes
            return
        _fill(asset, result)
        if asset.width and asset.height:
            claim = f"The {asset.detected_format} header of the {asset.modality.value} at '{param}' claims"
            check_size(asset.width, asset.height, self._limits, param, claim)
        if asset.duration_s is not None and asset.duration_s > self._limits.max_duration_s:
            raise RequestError(
                f"The media at '{param}' lasts {asset.duration_s:g} s; the limit is "
                f"{self._limits.max_duration_s:g} s.",
                param=param,
            )

    def _apply_hints(self, asset: MediaAsset) -> None:
        if self._hints is None:
            self._hints = read_hints(self._headers, self._limits)
        hints = self._hints
        if asset.modality is Modality.AUDIO:
            if asset.duration_s is None:
                asset.duration_s = hints.audio_duration_s
            return
        if (asset.width is None or asset.height is None) and hints.video_size is not None:
            asset.width, asset.height = hints.video_size
        if asset.duration_s is None:
            asset.duration_s = hints.video_duration_s
        if asset.fps is None:
            asset.fps = hints.video_fps


def apply_head(asset: MediaAsset, head: bytes) -> bool:
    """Fill a URL asset's size from the first bytes of its file (the opt-in URL probe), by the same
    header readers as inline media; ``True`` when that made it complete. Bytes of another kind than
    the part says (a page of HTML behind an image URL) leave it unprobed."""
    fmt, result = probe(BytesReader(head))
    if result is None or fmt not in _FORMATS_FOR[asset.modality]:
        return False
    asset.detected_format = fmt
    _fill(asset, result)
    asset.probed = _complete(asset)
    return asset.probed


def _not_media(modality: Modality, fmt: str | None, param: str) -> RequestError:
    """The model server cannot decode these bytes as the part says (vLLM answers 400 after the
    upload); the sniffed kind is named so a client sees what it sent."""
    if fmt is None:
        found = "no image, video, audio or PDF header the gateway knows"
    else:
        kind = next(m for m, formats in _FORMATS_FOR.items() if fmt in formats)
        found = f"{_ARTICLE[kind]} {kind.value} header ({fmt})"
    what = "PDF" if modality is Modality.DOCUMENT else modality.value
    return RequestError(
        f"The {modality.value} part at '{param}' is not {_ARTICLE[modality]} {what} file: "
        f"its bytes start with {found}.",
        param=param,
        code="invalid_media",
    )


def _fill(asset: MediaAsset, result: ProbeResult) -> None:
    asset.width = result.width if result.width and result.width > 0 else None
    asset.height = result.height if result.height and result.height > 0 else None
    asset.duration_s = result.duration_s if result.duration_s and result.duration_s > 0 else None
    asset.fps = result.fps or None
    asset.sample_rate = result.sample_rate or None
    asset.channels = result.channels or None
    asset.pages = result.pages or None


def _complete(asset: MediaAsset) -> bool:
    """Whether everything pricing needs is known: size (images), size and length (video), length (audio)."""
    if asset.modality is Modality.IMAGE:
        return asset.width is not None and asset.height is not None
    if asset.modality is Modality.VIDEO:
        return asset.width is not None and asset.height is not None and asset.duration_s is not None
    if asset.modality is Modality.AUDIO:
        return asset.duration_s is not None
    if asset.modality is Modality.DOCUMENT:
        return asset.pages is not None
    return False
