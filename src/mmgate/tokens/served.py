"""Pricing for the model a request is served by: the token-producer's ``exact`` mode.

llm-d's ``estimate`` modes are formulas a user tunes by hand (``w*h/factor`` is 900 tokens for a
1280x720 image; the Qwen3-VL pods count 880 + 2). The ``exact`` mode prices with the served
model family's own rules instead, the counts ``mmgate tokens`` prints. The family is the one named
in the block, else the config's ``mmgate.pricing.family``, else the one the request's ``model`` id
names (:func:`~mmgate.tokens.families.family_for_model`); a model id that names no known family is
priced by llm-d's estimate, with the same defaults, rather than by a guessed family.

:class:`ServedPricing` holds one :class:`PricingConfig` per served model id, built on first use, so
pricing a request is a dict lookup away from :func:`~mmgate.tokens.price`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import msgspec

from mmgate.tokens.estimator import AudioDefaults, EstimateConfig, ImageDefaults, Resolution, VideoDefaults
from mmgate.tokens.families import family_for_model
from mmgate.tokens.pricing import PricingConfig

MAX_MODELS = 256  # distinct model ids remembered; a client inventing ids cannot grow memory


class _Strict(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    pass


class ExactVideo(VideoDefaults):
    """llm-d's video defaults plus the source frame rate. In llm-d's ``estimate`` block the rate is
    ``frames.strided.defaultSourceFPS``, read only by its strided frame count; the exact block has
    no ``frames`` section, so the rate sits with the other defaults."""

    defaultSourceFPS: float = 0.0


class ExactConfig(_Strict):
    """The ``exact`` block of the token-producer's parameters (mmgate's; llm-d has no such mode).

    The ``default*`` fields are what a URL image, a URL video or a video without
    ``x-llm-d-video-*`` headers is priced as (the media is never fetched); zero or absent means
    llm-d's built-in default (640x360, 10 s, 24 fps)."""

    family: str | None = None
    familyParams: dict[str, Any] = msgspec.field(default_factory=dict)
    image: ImageDefaults | None = None
    video: ExactVideo | None = None
    audio: AudioDefaults | None = None


def _size(res: Resolution | None) -> tuple[int, int] | None:
    return (res.width, res.height) if res is not None and (res.width or res.height) else None


def _positive(value: float) -> float | None:
    return value if value > 0 else None


def exact_pricing(cfg: ExactConfig, family: str | None, **settings: Any) -> ServedPricing:
    """The pricing of the exact block: by ``family`` when one is known from the config, else by
    each request's model id. ``settings`` are further :class:`PricingConfig` fields."""
    image, video, audio = (
        cfg.image or ImageDefaults(),
        cfg.video or ExactVideo(),
        cfg.audio or AudioDefaults(),
    )
    template = PricingConfig(
        family=family,
        params=cfg.familyParams if family is not None else {},
        estimate=None if family is not None else EstimateConfig(),  # for ids naming no family
        default_image=_size(image.defaultResolution),
        default_video=_size(video.defaultResolution),
        default_video_duration_s=_positive(video.defaultDuration),
        default_video_fps=_positive(video.defaultSourceFPS),
        default_audio_duration_s=_positive(audio.defaultDuration),
        **settings,
    )
    return ServedPricing(template, by_model=family is None)


class ServedPricing:
    """The :class:`PricingConfig` for each served model id.

    ``by_model`` prices each model by its own family (the exact mode without a named family;
    ``template`` is then the estimate for ids naming no family). Otherwise ``template`` prices
    every request; when it refuses unserved modalities, the family the model id names (if any)
    says which modalities the model takes.
    """

    __slots__ = ("_by_model", "_cache", "template")

    def __init__(self, template: PricingConfig, *, by_model: bool = False) -> None:
        self.template = template
        self._by_model = by_model
        self._cache: dict[str, PricingConfig] = {}

    @property
    def by_model(self) -> bool:
        return self._by_model

    def for_model(self, model: str) -> PricingConfig:
        cached = self._cache.get(model)
        if cached is not None:
            return cached
        made = self._make(model)
        if len(self._cache) < MAX_MODELS:
            self._cache[model] = made
        return made

    def _make(self, model: str) -> PricingConfig:
        template = self.template
        family = family_for_model(model) if model else None
        if self._by_model:
            if family is not None:
                return dataclasses.replace(template, family=family, estimate=None)
            return template  # llm-d's estimate, with the same defaults
        if template.refuse_unserved and template.served_family is None and family is not None:
            return dataclasses.replace(template, served_family=family)
        return template
