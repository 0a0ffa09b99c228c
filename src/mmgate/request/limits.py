"""What a request may carry before the gateway refuses it (all client errors, never 500s)."""

from __future__ import annotations

from dataclasses import dataclass

from mmgate.config.schema import LimitsSpec, ValidationSpec

_FILE = LimitsSpec()  # the config file's documented defaults are the parser's defaults


@dataclass(frozen=True, slots=True)
class Limits:
    """Bounds checked while parsing (``mmgate.limits`` and ``mmgate.validation`` in a config)."""

    max_body_bytes: int = _FILE.maxBodyBytes
    max_assets: int = _FILE.maxMediaItems
    max_dimension: int = _FILE.maxDimension
    max_pixels: int = _FILE.maxPixels
    max_duration_s: float = _FILE.maxDurationS
    validate_base64: bool = _FILE.validateBase64
    url_schemes: frozenset[str] = frozenset(_FILE.urlSchemes)  # others (file:, ftp:) are refused
    # Refusals of what the model server would refuse anyway (``mmgate.validation``):
    require_model: bool = False  # a missing or empty "model" is a 400 naming it (on in the gateway)
    check_media_content: bool = True  # inline bytes must be a media file of the part's kind
    # The gateway writes content identities as parts' uuids (``mmgate.mediaUuids``): a client uuid of
    # that form on a part with data must be that data's identity (mmgate.request.media_uuids).
    own_media_uuids: bool = False

    @classmethod
    def from_config(cls, spec: LimitsSpec, validation: ValidationSpec | None = None) -> Limits:
        """The limits a config sets; with ``validation`` (the gateway's), its refusals switched as set."""
        defaults = cls()
        return cls(
            max_body_bytes=spec.maxBodyBytes,
            max_assets=spec.maxMediaItems,
            max_dimension=spec.maxDimension,
            max_pixels=spec.maxPixels,
            max_duration_s=spec.maxDurationS,
            validate_base64=spec.validateBase64,
            url_schemes=frozenset(s.lower() for s in spec.urlSchemes),
            require_model=validation.model if validation is not None else defaults.require_model,
            check_media_content=(
                validation.mediaContent if validation is not None else defaults.check_media_content
            ),
        )


DEFAULT_LIMITS = Limits()
