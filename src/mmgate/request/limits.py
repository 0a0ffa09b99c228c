"""What a request may carry before the gateway refuses it (all client errors, never 500s)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Limits:
    """Bounds checked while parsing. The defaults fit large multimodal models; tighten per fleet."""

    max_body_bytes: int = 64 * 1024 * 1024  # 413 above this, before any decoding
    max_assets: int = 128  # media parts per request, repeats included (each is encoded)
    max_dimension: int = 16384  # width or height, probed or declared in a header
    max_pixels: int = 16384 * 16384  # width * height
    max_duration_s: float = 4 * 3600.0  # video/audio, probed or declared
    validate_base64: bool = True  # check every inline payload's alphabet (one fast pass)
    url_schemes: frozenset[str] = frozenset({"http", "https"})  # others (file:, ftp:) are refused
    # Refusals of what the model server would refuse anyway (``mmgate.validation``):
    require_model: bool = False  # a missing or empty "model" is a 400 naming it (on in the gateway)
    check_media_content: bool = True  # inline bytes must be a media file of the part's kind
    # The gateway writes content identities as parts' uuids (``mmgate.mediaUuids``): a client uuid of
    # that form on a part with data must be that data's identity (mmgate.request.media_uuids).
    own_media_uuids: bool = False


DEFAULT_LIMITS = Limits()
