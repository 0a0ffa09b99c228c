"""Hosted API image/audio/document rules (Anthropic, OpenAI, Google Gemini), table-driven.

A provider is named ``anthropic``, ``gemini`` or ``openai:MODEL``, or by a model name as users
write it (``claude-sonnet-4-5``, ``gpt-4o-2024-08-06``, ``gemini-2.5-pro``; see :func:`get_provider`).
OpenAI models are rows of :data:`OPENAI_MODELS`: either a *patch* model (32-px patches within a
patch budget, times a per-model factor, rounded up) or a *tile* model (base + per-512-px-tile
tokens after gpt-4o's downscaling). Add a model by adding a row.
"""

from __future__ import annotations

import math
import re
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


# Claude renders each PDF page as an image and adds the page's extracted text beside it (Anthropic,
# "PDF support"). A page image is scaled down to the vision limit before it is counted (Anthropic,
# "Vision": beyond ~1,600 tokens an image is scaled down, aspect kept), so an image-only page costs
# the same whatever its paper size; measured at 1,592-1,600 tokens for a scanned page.
ANTHROPIC_PAGE_TOKENS = 1600


def anthropic_document(pages: int, text_tokens: int) -> Count:
    """``pages`` page images at a fixed cost, plus the text layer's tokens (as ``extra``)."""
    return Count(pages * ANTHROPIC_PAGE_TOKENS, text_tokens)


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
    document: Callable[[int, int], Count] | None = None  # (pages, text-layer tokens)


PROVIDERS = ("anthropic", "gemini", "openai:MODEL")

# A dated snapshot (``gpt-4o-2024-08-06``, ``claude-sonnet-4-5-20250929``) or a moving alias
# (``-latest``) prices like its base model.
_SNAPSHOT = re.compile(r"-(?:\d{4}-\d{2}-\d{2}|\d{8}|latest)$")
# How routers and SDKs prefix a model with its vendor: ``openai/gpt-4o``, ``anthropic:claude-...``.
_VENDOR = re.compile(r"^(openai|anthropic|google|gemini|vertex_ai|azure)[:/]")


def base_model_name(name: str) -> str:
    """A model name as users write it, reduced to the name price lists use: lower case, without a
    vendor prefix or a dated snapshot (``OpenAI/GPT-4o-2024-08-06`` → ``gpt-4o``)."""
    key = name.strip().lower()
    if vendor := _VENDOR.match(key):
        key = key[vendor.end() :]
    return _SNAPSHOT.sub("", key)


def openai_model(name: str) -> str | None:
    """The :data:`OPENAI_MODELS` row a model name prices like: its :func:`base_model_name`, or
    the longest row that extends at a ``-`` boundary (``o3-pro`` → ``o3``,
    ``gpt-4o-search-preview`` → ``gpt-4o``)."""
    key = base_model_name(name).removeprefix("chat")  # chatgpt-4o-latest: ChatGPT's gpt-4o
    if key in OPENAI_MODELS:
        return key
    bases = [m for m in OPENAI_MODELS if key.startswith(m + "-")]
    return max(bases, key=len) if bases else None


def get_provider(name: str) -> Provider:
    """A hosted API's rule by the names users write: ``anthropic`` or any ``claude-*`` model,
    ``gemini`` or any ``gemini-*`` model, ``openai:MODEL`` or a bare OpenAI model name
    (``gpt-4o``, ``GPT-4o-2024-08-06``, ``openai/o3``); case and dated snapshots do not matter."""
    vendor = _VENDOR.match(name.strip().lower())
    key = base_model_name(name)
    if key in ("anthropic", "claude") or key.startswith("claude-"):
        return Provider("anthropic", anthropic_image, document=anthropic_document)
    if key in ("gemini", "google") or key.startswith("gemini-"):
        return Provider("gemini", gemini_image, audio=gemini_audio, video=gemini_video)
    model_name = openai_model(key)
    if model_name is None:
        if (vendor and vendor.group(1) == "openai") or key.startswith(("gpt-", "o1", "o3", "o4", "chatgpt")):
            raise unknown("OpenAI model", key, OPENAI_MODELS)
        raise unknown("provider", name, [*PROVIDERS[:2], *OPENAI_MODELS])
    model = OPENAI_MODELS[model_name]

    def image(width: int, height: int, detail: str | None) -> Count:
        return openai_image(model, width, height, detail)

    return Provider(f"openai:{model_name}", image)


def hosted_rules() -> list[dict[str, str]]:
    """Every ``--provider`` rule, the names it takes and how it counts (``mmgate tokens --list``)."""
    rows = [
        {
            "provider": "anthropic",
            "takes": "anthropic, claude, any claude-* model",
            "rule": f"ceil(w/{ANTHROPIC_PATCH})·ceil(h/{ANTHROPIC_PATCH}) after shrinking to "
            f"≤{ANTHROPIC_MAX_EDGE} px and ≤{ANTHROPIC_MAX_TOKENS} tokens; +{ANTHROPIC_EXTRA} per image",
        },
        {
            "provider": "gemini",
            "takes": "gemini, google, any gemini-* model",
            "rule": f"{GEMINI_TOKENS_PER_TILE} per {GEMINI_TILE}-px tile ({GEMINI_TOKENS_PER_TILE} when "
            f"both sides ≤{GEMINI_SMALL_EDGE}); audio {GEMINI_AUDIO_PER_S}/s; video {GEMINI_VIDEO_PER_S}/s",
        },
    ]
    for name, m in OPENAI_MODELS.items():
        if m.kind == "patch":
            rule = f"{OPENAI_PATCH}-px patches (≤{m.budget}) × {m.factor:g}"
        else:
            rule = f"{m.base} + {m.tile} per 512-px tile (detail low: {m.base})"
        rows.append({"provider": f"openai:{name}", "takes": f"{name}, its dated snapshots", "rule": rule})
    return rows
