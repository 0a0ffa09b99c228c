"""Hosted API image/audio rules (Anthropic, OpenAI, Google Gemini), table-driven.

A provider is named ``anthropic``, ``gemini`` or ``openai:MODEL``. OpenAI models are rows of
:data:`OPENAI_MODELS`: either a *patch* model (32-px patches within a patch budget, times a per-model
factor, rounded up) or a *tile* model (base + per-512-px-tile tokens after gpt-4o's downscaling).
Add a model by adding a row.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from mmgate.tokens.rules import Count, unknown

# --- Anthropic --------------------------------------------------------------------------------
ANTHROPIC_PATCH = 28
ANTHROPIC_MAX_EDGE = 2576
ANTHROPIC_MAX_TOKENS = 4784
ANTHROPIC_EXTRA = 3  # tokens the API adds around each image


def _patches(width: float, height: float, patch: int) -> int:
    # The tiny slack keeps float noise (1056.0000000001 px) from adding a patch row.
    return math.ceil(width / patch - 1e-9) * math.ceil(height / patch - 1e-9)


def anthropic_image(width: int, height: int, detail: str | None = None) -> Count:
    """ceil(w/28)*ceil(h/28) after shrinking (aspect kept) to ≤2576 px long edge and ≤4784 tokens."""
    w, h = float(width), float(height)
    long_edge = max(w, h)
    if long_edge > ANTHROPIC_MAX_EDGE:
        s = ANTHROPIC_MAX_EDGE / long_edge
        w, h = max(1.0, math.floor(w * s)), max(1.0, math.floor(h * s))
    if _patches(w, h, ANTHROPIC_PATCH) > ANTHROPIC_MAX_TOKENS:
        # Largest integer size of the same aspect whose patch grid fits the budget.
        s = math.sqrt(ANTHROPIC_MAX_TOKENS * ANTHROPIC_PATCH**2 / (w * h))
        while True:
            nw, nh = max(1.0, math.floor(w * s)), max(1.0, math.floor(h * s))
            if _patches(nw, nh, ANTHROPIC_PATCH) <= ANTHROPIC_MAX_TOKENS:
                break
            s *= 0.995
        w, h = nw, nh
    return Count(_patches(w, h, ANTHROPIC_PATCH), ANTHROPIC_EXTRA)


# --- OpenAI -----------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class OpenAIModel:
    """``kind="patch"``: ceil(patches(32 px, ≤budget) * factor). ``kind="tile"``: base + tile*tiles."""

    kind: str
    factor: float = 1.0  # patch models
    budget: int = 1536  # patch models: most patches before the image is shrunk
    base: int = 0  # tile models: tokens for the low-detail thumbnail
    tile: int = 0  # tile models: tokens per 512-px tile


# Sources: OpenAI "Images and vision" guide (patch multipliers: gpt-4.1-mini 1.62, gpt-4.1-nano
# 2.46, o4-mini 1.72; tile costs: gpt-4o / gpt-4.1 / gpt-4.5 85+170, gpt-4o-mini 2833+5667,
# o1 / o3 75+150) and the mmgate issue for gpt-5.5 and gpt-6-astra (factor 1.2).
OPENAI_MODELS: dict[str, OpenAIModel] = {
    "gpt-6-astra": OpenAIModel("patch", factor=1.2),
    "gpt-5.5": OpenAIModel("patch", factor=1.2),
    "gpt-5-mini": OpenAIModel("patch", factor=1.62),
    "gpt-5-nano": OpenAIModel("patch", factor=2.46),
    "gpt-4.1-mini": OpenAIModel("patch", factor=1.62),
    "gpt-4.1-nano": OpenAIModel("patch", factor=2.46),
    "o4-mini": OpenAIModel("patch", factor=1.72),
    "gpt-4o": OpenAIModel("tile", base=85, tile=170),
    "gpt-4.1": OpenAIModel("tile", base=85, tile=170),
    "gpt-4.5": OpenAIModel("tile", base=85, tile=170),
    "gpt-4o-mini": OpenAIModel("tile", base=2833, tile=5667),
    "o1": OpenAIModel("tile", base=75, tile=150),
    "o3": OpenAIModel("tile", base=75, tile=150),
}

OPENAI_PATCH = 32


def openai_patch_count(width: int, height: int, budget: int) -> int:
    """32-px patches, shrinking the image (then to whole patches) when over ``budget``."""
    patches = _patches(width, height, OPENAI_PATCH)
    if patches <= budget:
        return patches
    r = math.sqrt(OPENAI_PATCH**2 * budget / (width * height))
    pw, ph = width * r / OPENAI_PATCH, height * r / OPENAI_PATCH
    r *= min(math.floor(pw) / pw, math.floor(ph) / ph)
    return _patches(width * r, height * r, OPENAI_PATCH)


def openai_tiles(width: int, height: int) -> int:
    """512-px tiles after fitting in 2048x2048 and scaling the short side down to 768."""
    w, h = float(width), float(height)
    if max(w, h) > 2048:
        s = 2048 / max(w, h)
        w, h = w * s, h * s
    if min(w, h) > 768:
        s = 768 / min(w, h)
        w, h = w * s, h * s
    return math.ceil(w / 512 - 1e-9) * math.ceil(h / 512 - 1e-9)


def openai_image(model: OpenAIModel, width: int, height: int, detail: str | None) -> Count:
    if model.kind == "patch":
        return Count(math.ceil(openai_patch_count(width, height, model.budget) * model.factor - 1e-9))
    if detail == "low":
        return Count(model.base)
    return Count(model.base + model.tile * openai_tiles(width, height))


# --- Google Gemini ----------------------------------------------------------------------------
GEMINI_SMALL_EDGE = 384
GEMINI_TILE = 768
GEMINI_TOKENS_PER_TILE = 258
GEMINI_AUDIO_PER_S = 32
GEMINI_VIDEO_PER_S = 263  # frames at 1 fps (258) plus the audio track, per Gemini's token docs


def gemini_image(width: int, height: int, detail: str | None = None) -> Count:
    if width <= GEMINI_SMALL_EDGE and height <= GEMINI_SMALL_EDGE:
        return Count(GEMINI_TOKENS_PER_TILE)
    tiles = math.ceil(width / GEMINI_TILE) * math.ceil(height / GEMINI_TILE)
    return Count(tiles * GEMINI_TOKENS_PER_TILE)


def gemini_audio(duration_s: float) -> Count:
    return Count(math.ceil(duration_s * GEMINI_AUDIO_PER_S - 1e-9))


def gemini_video(width: int, height: int, duration_s: float, fps: float) -> Count:
    return Count(math.ceil(duration_s * GEMINI_VIDEO_PER_S - 1e-9))


# --- registry ---------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Provider:
    name: str
    image: Callable[[int, int, str | None], Count]
    audio: Callable[[float], Count] | None = None
    video: Callable[[int, int, float, float], Count] | None = None


PROVIDERS = ("anthropic", "gemini", "openai:MODEL")


def get_provider(name: str) -> Provider:
    """``anthropic``, ``gemini`` or ``openai:MODEL`` (see :data:`OPENAI_MODELS`)."""
    key = name.strip().lower()
    if key in ("anthropic", "claude"):
        return Provider("anthropic", anthropic_image)
    if key in ("gemini", "google"):
        return Provider("gemini", gemini_image, audio=gemini_audio, video=gemini_video)
    if key.startswith("openai:"):
        model_name = key.split(":", 1)[1]
        model = OPENAI_MODELS.get(model_name)
        if model is None:
            raise unknown("OpenAI model", model_name, OPENAI_MODELS)

        def image(width: int, height: int, detail: str | None) -> Count:
            return openai_image(model, width, height, detail)

        return Provider(f"openai:{model_name}", image)
    raise unknown("provider", name, [*PROVIDERS[:2], *(f"openai:{m}" for m in OPENAI_MODELS)])
