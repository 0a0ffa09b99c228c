"""Pricing a request: text tokens, tokens per media item, totals per modality.

``price(view, config)`` is what the scheduler's token producer calls for every request, so the
configuration is resolved once (``PricingConfig.__post_init__``) and pricing an asset is a dict
lookup and a few integer operations. Repeats of one asset are priced every time they appear,
because the model sees them every time.

Where an asset's size, duration or frame rate comes from, first match wins (one order for every
pricing mode; docs/tokens.md "Defaults"):

1. the media's own header (probed inline payloads);
2. the request's ``x-llm-d-video-*`` / ``x-llm-d-audio-duration-seconds`` headers (video, audio);
3. the configured default: ``PricingConfig.default_*`` (the token-producer's ``exact`` block),
   else the ``estimate`` block's ``defaultResolution`` / ``defaultDuration`` /
   ``strided.defaultSourceFPS``;
4. llm-d's built-in defaults (640x360, 10 s, 24 fps source; 10 s of audio).

Steps 3 and 4 mark the asset ``defaulted``. The rule that counts the resolved size is the
configured one (family, provider or estimate) in every case.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, TypeAlias, TypeVar

import msgspec

from mmgate.errors import RequestError
from mmgate.request.view import Api, MediaAsset, Modality, RequestView
from mmgate.tokens.estimator import EstimateConfig, Estimator
from mmgate.tokens.families import get_family
from mmgate.tokens.providers import Provider, get_provider
from mmgate.tokens.rules import (
    MAX_SIDE,
    Count,
    Family,
    UnknownNameError,
    check_duration,
    check_fps,
    check_size,
)
from mmgate.tokens.text import TextCounter, estimate_runs, load_tokenizer

T = TypeVar("T")
ImageKey: TypeAlias = tuple[str, Modality, int | None, int | None, str | None]  # Resolved._images
IMAGE_CACHE_SIZE = 4096  # distinct (width, height, detail) counts kept per pricing config
IMAGE_PRICES = 4096  # priced images kept per pricing config, by identity and size (popular ones recur)
# The members as module constants: an enum member read through its class costs ~90 ns on CPython
# 3.11, a global ~10 ns, and pricing compares every asset's modality several times.
_IMAGE, _VIDEO, _AUDIO = Modality.IMAGE, Modality.VIDEO, Modality.AUDIO
_EMBEDS, _DOCUMENT = Modality.EMBEDS, Modality.DOCUMENT
DEFAULT_DOCUMENT_PAGES = 1  # a document whose page count is unknown (URL, file id, compressed tree)


class AssetPrice(msgspec.Struct, frozen=True):
    """One media item's price. (This and :class:`Pricing` are msgspec structs rather than
    dataclasses: every request makes one per item, and a struct's ``__init__`` runs in C.)
    Frozen: the token producer keeps an image's price and hands it to every later request that
    carries the same image (``Resolved.price_asset``), so no request may change it for others."""

    identity: str
    modality: Modality
    tokens: int  # encoder positions (visual/audio embeddings)
    extra_tokens: int  # placeholder / separator tokens around them
    rule: str  # what priced it: "qwen3-vl", "llm-d:dynamic", "anthropic", ...
    defaulted: bool  # size/duration came from configured defaults, not the media
    width: int | None = None
    height: int | None = None
    duration_s: float | None = None
    pages: int | None = None  # documents (``tokens``: page images, ``extra_tokens``: text layer)

    @property
    def total(self) -> int:
        return self.tokens + self.extra_tokens


class Pricing(msgspec.Struct):
    text_tokens: int
    assets: list[AssetPrice]
    total_tokens: int
    by_modality: dict[Modality, int]  # tokens + extra_tokens per modality

    @property
    def image_tokens(self) -> int:
        return self.by_modality.get(Modality.IMAGE, 0)

    @property
    def video_tokens(self) -> int:
        return self.by_modality.get(Modality.VIDEO, 0)

    @property
    def audio_tokens(self) -> int:
        return self.by_modality.get(Modality.AUDIO, 0)

    @property
    def media_tokens(self) -> int:
        return self.total_tokens - self.text_tokens

    @property
    def document_tokens(self) -> int:
        return self.by_modality.get(Modality.DOCUMENT, 0)


@dataclass(frozen=True)
class PricingConfig:
    """How to price media. Exactly one of ``family`` (default), ``estimate`` or ``provider`` applies.

    - ``family``: a served model family (``mmgate tokens --list``) with ``params`` overrides; a
      modality the family has no rule for (e.g. audio on an image-only model) falls back to
      ``audio_family`` / the llm-d estimate, and the asset's ``rule`` says so.
    - ``estimate``: llm-d's token-producer ``estimate`` modes, count for count.
    - ``provider``: a hosted API rule (``anthropic``, ``openai:MODEL``, ``gemini``).
    """

    family: str | None = "qwen3-vl"
    params: Mapping[str, object] = field(default_factory=dict)
    estimate: EstimateConfig | None = None
    provider: str | None = None
    audio_family: str | None = None
    # Configured defaults for what the media does not say; None: the estimate block's, then llm-d's.
    default_image: tuple[int, int] | None = None
    default_video: tuple[int, int] | None = None
    default_video_duration_s: float | None = None
    default_video_fps: float | None = None
    default_audio_duration_s: float | None = None
    tokenizer: str | None = None  # path of a local tokenizer.json for exact text counts
    # Refuse (400) a modality the served family has no rule for, rather than price it by estimate.
    # The served family is ``served_family``, else ``family`` when pricing by family; with
    # neither (estimate, provider) nothing is refused.
    refuse_unserved: bool = False
    served_family: str | None = None
    max_total_tokens: int = 16_777_216  # beyond any model's context: refused before building a sequence
    _resolved: Resolved = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_resolved", Resolved(self))

    @property
    def resolved(self) -> Resolved:
        """The rules resolved from this config, what :func:`price` and
        :func:`mmgate.tokens.sequence.price_stream` price each asset with."""
        return self._resolved


class Resolved:
    """Everything ``price`` needs, looked up and validated once (``PricingConfig.resolved``)."""

    def __init__(self, cfg: PricingConfig) -> None:
        chosen = [n for n, v in (("estimate", cfg.estimate), ("provider", cfg.provider)) if v is not None]
        if len(chosen) > 1:
            raise ValueError("PricingConfig: set at most one of estimate or provider")
        self.cfg = cfg
        self.estimator = est = Estimator(cfg.estimate)
        self.default_image = check_size(*_first(cfg.default_image, est.image_default), param="default_image")
        self.default_video = check_size(*_first(cfg.default_video, est.video_default), param="default_video")
        self.default_video_s = check_duration(
            _first(cfg.default_video_duration_s, est.video_default_s), param="default_video_duration_s"
        )
        self.default_fps = check_fps(_first(cfg.default_video_fps, est.source_fps), param="default_video_fps")
        self.default_audio_s = check_duration(
            _first(cfg.default_audio_duration_s, est.audio_default_s), param="default_audio_duration_s"
        )
        self.family: Family[Any] | None = None
        self.provider: Provider | None = None
        self.audio_family: Family[Any] | None = None
        if cfg.provider is not None:
            self.provider = get_provider(cfg.provider)
            self.name = self.provider.name
        elif cfg.estimate is not None:
            self.name = "llm-d-estimate"
        else:
            if cfg.family is None:
                raise ValueError("PricingConfig: set a family, an estimate or a provider")
            self.family = get_family(cfg.family).with_params(cfg.params)
            self.name = self.family.name
        # Sizes repeat (phone cameras, screenshots, resized uploads, one document's pages):
        # recent image counts, whichever rule made them, by (width, height, detail). The size is
        # validated inside, so a size seen before is not checked again; ``typed`` keeps a float or
        # bool size from sharing an int's entry (it is refused, not priced as that int).
        self.image: Callable[[int, int, str | None], tuple[Count, str]] = lru_cache(
            maxsize=IMAGE_CACHE_SIZE, typed=True
        )(self._count_image)
        if cfg.audio_family is not None:
            self.audio_family = get_family(cfg.audio_family)
            if self.audio_family.audio is None:
                raise UnknownNameError(f"audio_family {cfg.audio_family!r} has no audio rule")
        self.accepts: frozenset[Modality] | None = None
        self.served_name = ""
        served = self.family if cfg.served_family is None else get_family(cfg.served_family)
        if cfg.refuse_unserved and served is not None:
            takes = {Modality(m) for m in served.modalities} | {Modality.EMBEDS, Modality.DOCUMENT}
            if self.audio_family is not None:
                takes.add(Modality.AUDIO)
            self.accepts = frozenset(takes)
            self.served_name = served.name
        # What is refused, as a tuple: ``in`` on it compares members by identity first, where a
        # set would call the enum's Python-level ``__hash__`` for every asset.
        self.refused: tuple[Modality, ...] = tuple(
            m for m in Modality if self.accepts is not None and m not in self.accepts and m is not _DOCUMENT
        )
        # No open-weight family here reads PDFs (vLLM's chat API takes no file parts); hosted APIs
        # with a documented page rule do.
        self.documents = self.provider is not None and self.provider.document is not None
        self.refuse_documents = cfg.refuse_unserved and not self.documents
        self.text: TextCounter = load_tokenizer(cfg.tokenizer) if cfg.tokenizer else estimate_runs
        self.estimate_image_rule = (
            "llm-d:static" if self.estimator.image_static is not None else "llm-d:dynamic"
        )
        # Recent image prices by what an image's price is a function of under this config:
        # (identity, modality, width, height, detail). A recurring image (a conversation resending
        # it, a shared screenshot) is then one dict lookup, not a rule call and a new AssetPrice
        # (frozen, so sharing it is safe). Only prices go in (never a refusal), IMAGE_PRICES at most.
        self._images: dict[ImageKey, AssetPrice] = {}

    def price_asset(self, a: MediaAsset, model: str) -> AssetPrice:
        mod = a.modality
        if mod is _IMAGE or mod is _EMBEDS:
            w, h = a.width, a.height
            key = (a.identity, mod, w, h, a.detail)
            found = self._images.get(key)
            # Only an int (or absent) size is kept or found: a float or bool size equals an int one
            # but is refused, as the image count's cache keeps apart (``typed``).
            plain = (w is None or type(w) is int) and (h is None or type(h) is int)
            if found is not None and plain:
                return found
            found = self._price_asset(a, model)  # raises on a size or modality it refuses
            if plain:
                if len(self._images) >= IMAGE_PRICES:
                    self._images.clear()  # bounded; the popular ones come straight back
                self._images[key] = found
            return found
        return self._price_asset(a, model)

    def _price_asset(self, a: MediaAsset, model: str) -> AssetPrice:
        mod = a.modality
        if mod is _DOCUMENT and self.refuse_documents:
            raise RequestError(
                f"The model '{model}' does not take document input; remove the document at "
                f"'{a.field}', send its text instead, or send it to a model that reads PDFs.",
                param=a.field,
                code="unsupported_modality",
            )
        if self.refused and mod in self.refused:
            raise RequestError(
                f"The model '{model}' ({self.served_name} family) does not take {a.modality.value} "
                f"input; remove the {a.modality.value} part at '{a.field}' or send it to a model that "
                f"takes {a.modality.value}.",
                param=a.field,
                code="unsupported_modality",
            )
        try:
            if mod is _IMAGE or mod is _EMBEDS:  # and precomputed embeddings (their length is not
                w, h = a.width, a.height  # known without decoding them): the common case, inline
                if w is None or h is None:
                    w, h = self.default_image
                    defaulted = True
                else:
                    defaulted = mod is _EMBEDS
                count, rule = self.image(w, h, a.detail)  # validates the size (param: below)
                return AssetPrice(a.identity, mod, count.tokens, count.extra, rule, defaulted, w, h)
            return self._price_other(a)
        except RequestError as exc:  # a rule refused the media (e.g. Qwen's 200:1 aspect limit)
            if exc.param is None:
                exc.param = a.field
            raise

    def _price_other(self, a: MediaAsset) -> AssetPrice:
        """Audio, video and documents (images are priced inline by :meth:`price_asset`)."""
        mod = a.modality
        if mod is _AUDIO:
            duration = a.duration_s
            defaulted = not duration or duration <= 0
            if defaulted:
                duration = self.default_audio_s
            assert duration is not None
            count, rule = self._audio(duration, a.field)
            return AssetPrice(
                a.identity, mod, count.tokens, count.extra, rule, defaulted, duration_s=duration
            )
        if mod is _VIDEO:
            w, h, dur = a.width, a.height, a.duration_s
            defaulted = w is None or h is None or not dur or dur <= 0
            if w is None or h is None:
                w, h = self.default_video
            if not dur or dur <= 0:
                dur = self.default_video_s
            fps = a.fps if a.fps and a.fps > 0 else self.default_fps
            self._check(w, h, a.field)
            check_duration(dur, param=a.field)
            check_fps(fps, param=a.field)
            count, rule = self._video(w, h, dur, fps)
            return AssetPrice(a.identity, mod, count.tokens, count.extra, rule, defaulted, w, h, dur)
        # documents
        pages = a.pages if a.pages else DEFAULT_DOCUMENT_PAGES
        text = -(-a.text_bytes // 4) if a.text_bytes else 0  # the text estimate: 4 bytes a token
        count, rule = self._document(pages, text)
        return AssetPrice(a.identity, mod, count.tokens, count.extra, rule, not a.pages, pages=pages)

    @staticmethod
    def _check(w: int, h: int, param: str | None) -> None:
        if not (0 < w <= MAX_SIDE and 0 < h <= MAX_SIDE) or type(w) is not int or type(h) is not int:
            check_size(w, h, param=param)  # raises with a message naming the field

    def _count_image(self, w: int, h: int, detail: str | None) -> tuple[Count, str]:
        self._check(w, h, None)  # a bad size raises before it is cached
        if self.family is not None and self.family.image is not None:
            return self.family.image(self.family.params, w, h), self.name
        if self.provider is not None:
            return self.provider.image(w, h, detail), self.name
        return self.estimator.image(w, h), self.estimate_image_rule

    def _video(self, w: int, h: int, dur: float, fps: float) -> tuple[Count, str]:
        if self.family is not None and self.family.video is not None:
            return self.family.video(self.family.params, w, h, dur, fps), self.name
        if self.provider is not None and self.provider.video is not None:
            return self.provider.video(w, h, dur, fps), self.name
        return self.estimator.video(w, h, dur, fps), "llm-d:video"

    def _document(self, pages: int, text_tokens: int) -> tuple[Count, str]:
        if self.provider is not None and self.provider.document is not None:
            return self.provider.document(pages, text_tokens), self.name
        # Not refused (validation off): each page as one image of the default size.
        page, rule = self.image(*self.default_image, None)
        return Count(pages * page.total, text_tokens), f"{rule}:pages"

    def _audio(self, duration: float, param: str) -> tuple[Count, str]:
        check_duration(duration, param=param)
        fam = self.family if self.family is not None and self.family.audio is not None else self.audio_family
        if fam is not None and fam.audio is not None:
            return fam.audio(fam.params, duration), fam.name
        if self.provider is not None and self.provider.audio is not None:
            return self.provider.audio(duration), self.name
        return self.estimator.audio(duration), "llm-d:audio"


def _first(configured: T | None, fallback: T) -> T:
    return configured if configured is not None else fallback


def _split(view: RequestView) -> tuple[list[str], list[MediaAsset]]:
    """One pass over the parts: the text runs between media items, and the media items."""
    runs: list[str] = []
    media: list[MediaAsset] = []
    current: list[str] = []
    for part in view.parts:
        if isinstance(part, str):
            current.append(part)
        else:
            media.append(part)
            if current:
                runs.append(current[0] if len(current) == 1 else "".join(current))
                current = []
    if current:
        runs.append(current[0] if len(current) == 1 else "".join(current))
    return runs, media


def price(view: RequestView, config: PricingConfig) -> Pricing:
    """Price every part of ``view`` under ``config`` (raises RequestError on impossible media)."""
    resolved = config._resolved
    runs, media_parts = _split(view)
    assets = [resolved.price_asset(p, view.model) for p in media_parts] if media_parts else []
    ids = view.prompt_token_ids
    text = len(ids) if ids is not None else resolved.text(runs)
    return priced(view, config, text, assets)


def priced(view: RequestView, config: PricingConfig, text: int, assets: list[AssetPrice]) -> Pricing:
    """The :class:`Pricing` of ``text`` tokens and the priced ``assets`` of ``view``: totals per
    modality, and the request refused if it is larger than any model accepts."""
    by_modality: dict[Modality, int] = {}
    media = 0
    for a in assets:
        t = a.tokens + a.extra_tokens
        media += t
        by_modality[a.modality] = by_modality.get(a.modality, 0) + t
    total = text + media
    if total > config.max_total_tokens:
        raise RequestError(
            f"the request prices at {total:,} tokens ({media:,} of them media), more than the "
            f"{config.max_total_tokens:,} any model here accepts; send fewer or smaller media",
            param="prompt" if view.api is Api.COMPLETIONS else "messages",
        )
    return Pricing(text, assets, total, by_modality)
