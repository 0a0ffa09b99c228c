"""Seeded, reproducible multimodal workloads.

A workload is a list of :class:`WorkItem` plus the order in which a load generator draws them.
Items describe media by size and key (:class:`~mmgate_bench.workloads.media.MediaSpec`), not by bytes:
the HTTP load generator renders each distinct asset once, lazily, while the discrete-event mode
builds a :class:`~mmgate.request.view.RequestView` straight from the sizes and keys and never
encodes an image at all. Text lengths are given in llm-d "estimate" tokens (4 bytes each), the
unit the gateway's default pricing and the simulator's sequences use.

Every generator is a pure function of its parameters and seed: the same flags give the same
prompts, the same images and the same request order on every machine.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import itertools
import json
import random
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import xxhash

from mmgate.request import role_header
from mmgate.request.view import Api, MediaAsset, Modality, RequestView, Source
from mmgate_bench.workloads.media import MediaCache, MediaSpec, audio, encoded_size, image, video

BYTES_PER_TOKEN = 4
DEFAULT_MODEL = "Qwen/Qwen3-VL-32B-Instruct"

# A small vocabulary is enough: prompts only need to be unique, sized, and plausible to read.
_VOCABULARY = (
    "the of and to in is for on that with as this by from at it be are an or was which can data "
    "model image photo product page report table chart figure value price colour size shape "
    "describe explain compare list summarise identify count estimate what where when why how "
    "left right top bottom centre background foreground label text number total average change "
    "quarter revenue growth region market customer item shelf box bottle shoe lamp chair watch "
    "camera phone bag jacket section paragraph line column row header footnote source method result"
)
_WORDS = tuple(_VOCABULARY.split())[:64]  # 64 words: one random byte picks one


def text_of(tokens: int, rng: random.Random) -> str:
    """About ``tokens`` estimate-tokens of seeded words (exactly ``4 * tokens`` bytes)."""
    size = tokens * BYTES_PER_TOKEN
    if size <= 0:
        return ""
    words = [_WORDS[b & 63] for b in rng.randbytes(size // 3 + 2)]
    return " ".join(words)[:size].rstrip() + "."


@dataclass(frozen=True, slots=True)
class Message:
    role: str
    parts: tuple[str | MediaSpec, ...]


@dataclass(frozen=True, slots=True)
class WorkItem:
    """One request of a workload: chat messages with media described by size, and output length."""

    id: str
    messages: tuple[Message, ...]
    output_tokens: int
    group: str = ""

    @property
    def media(self) -> list[MediaSpec]:
        return [p for m in self.messages for p in m.parts if isinstance(p, MediaSpec)]

    @property
    def text_tokens(self) -> int:
        size = sum(len(p) for m in self.messages for p in m.parts if isinstance(p, str))
        return size // BYTES_PER_TOKEN

    def body(self, media: MediaCache, model: str = DEFAULT_MODEL, stream: bool = True) -> dict[str, Any]:
        """The OpenAI chat-completions body, with media inlined as base64 (as inference-perf does)."""
        messages = [
            {"role": m.role, "content": [_content_part(p, media) for p in m.parts]} for m in self.messages
        ]
        body: dict[str, Any] = {
            "model": model,
            "messages": messages,
            "max_tokens": self.output_tokens,
            "ignore_eos": True,
            "stream": stream,
        }
        if stream:
            body["stream_options"] = {"include_usage": True}
        return body

    def view(self, model: str = DEFAULT_MODEL) -> RequestView:
        """The request as the gateway would read it, built from sizes and keys (no bytes)."""
        parts: list[str | MediaAsset] = []
        for i, m in enumerate(self.messages):
            parts.append(role_header(m.role))
            for j, p in enumerate(m.parts):
                if isinstance(p, str):
                    parts.append(p)
                else:
                    parts.append(asset_of(p, f"messages[{i}].content[{j}]"))
        return RequestView(
            api=Api.CHAT, model=model, parts=_merge_text(parts), stream=True, max_tokens=self.output_tokens
        )


def identity_of(key: str) -> str:
    """The content identity DES uses for an asset: stable per key, like a payload hash."""
    return xxhash.xxh3_128_hexdigest(key.encode())


def asset_of(spec: MediaSpec, path: str) -> MediaAsset:
    return MediaAsset(
        modality=spec.modality,
        source=Source.INLINE,
        identity=identity_of(spec.key),
        field=path,
        mime=spec.mime,
        detected_format=spec.fmt,
        width=spec.width or None,
        height=spec.height or None,
        duration_s=spec.duration_s or None,
        fps=spec.fps or None,
        sample_rate=spec.sample_rate or None,
        channels=1 if spec.modality is Modality.AUDIO else None,
        probed=True,
        payload_size=4 * -(-encoded_size(spec) // 3),  # its base64 text, as the HTTP mode sends it
    )


def _merge_text(parts: list[str | MediaAsset]) -> list[str | MediaAsset]:
    out: list[str | MediaAsset] = []
    for p in parts:
        if isinstance(p, str) and out and isinstance(out[-1], str):
            out[-1] = out[-1] + p
        else:
            out.append(p)
    return out


def _content_part(part: str | MediaSpec, media: MediaCache) -> dict[str, Any]:
    if isinstance(part, str):
        return {"type": "text", "text": part}
    if part.modality is Modality.IMAGE:
        return {"type": "image_url", "image_url": {"url": media.data_uri(part)}}
    if part.modality is Modality.VIDEO:
        return {"type": "video_url", "video_url": {"url": media.data_uri(part)}}
    return {"type": "input_audio", "input_audio": {"data": media.b64(part), "format": part.fmt}}


@dataclass(slots=True)
class Workload:
    """Items plus draw order: ``random`` samples items uniformly (seeded), ``cycle`` replays them in order."""

    name: str
    items: list[WorkItem]
    order: str = "random"
    seed: int = 0
    params: dict[str, Any] = field(default_factory=dict)

    def stream(self, seed: int | None = None) -> Iterator[WorkItem]:
        if not self.items:
            raise ValueError(f"workload {self.name!r} has no items")
        if self.order == "cycle":
            yield from itertools.cycle(self.items)
            return
        rng = random.Random(self.seed if seed is None else seed)
        while True:
            yield self.items[rng.randrange(len(self.items))]

    def take(self, n: int, seed: int | None = None) -> list[WorkItem]:
        return list(itertools.islice(self.stream(seed), n))

    def distinct_media(self) -> int:
        return len({m.key for item in self.items for m in item.media})


def _recorded(gen: Callable[..., Workload]) -> Callable[..., Workload]:
    """Record the full parameter set (defaults included) on the workload, for reports."""

    @functools.wraps(gen)
    def wrapper(*args: Any, **kwargs: Any) -> Workload:
        bound = inspect.signature(gen).bind(*args, **kwargs)
        bound.apply_defaults()
        workload = gen(*args, **kwargs)
        workload.params = dict(bound.arguments)
        return workload

    return wrapper


# Product photos as shops upload them: square and 3:4 / 4:3, 1-2.5 megapixels.
PRODUCT_PHOTO_SIZES = [(1024, 1024), (1280, 1280), (1536, 1536), (1200, 1600), (1600, 1200)]


# --- generators --------------------------------------------------------------------------------


@_recorded
def shared_prefix(
    groups: int = 600,
    prompts_per_group: int = 5,
    system_tokens: int = 100,
    question_tokens: int = 1200,
    images: int = 3,
    width: int = 1280,
    height: int = 720,
    output_tokens: int = 300,
    seed: int = 0,
) -> Workload:
    """llm-d's multimodal aggregation benchmark shape: per group, K images then a shared system
    prompt; per prompt, a unique question. Requests draw prompts uniformly at random."""
    items = []
    for g in range(groups):
        rng = random.Random(f"{seed}:shared-prefix:{g}")
        system = text_of(system_tokens, rng)
        shots = tuple(image(f"{seed}:sp:{g}:{k}", width, height) for k in range(images))
        for p in range(prompts_per_group):
            question = text_of(question_tokens, rng)
            msg = Message("user", (*shots, system + "\n" + question))
            items.append(WorkItem(f"sp-{g}-{p}", (msg,), output_tokens, group=f"g{g}"))
    return Workload("shared-prefix", items, "random", seed)


@_recorded
def image_reuse(
    pool: int = 300,
    requests: int = 20_000,
    zipf_s: float = 1.0,
    question_tokens: int = 100,
    output_tokens: int = 300,
    seed: int = 0,
) -> Workload:
    """Product photos (1-2.5 MP) asked about by unrelated questions, popularity Zipf(s).
    The question comes first, so no two requests share a text prefix: only an encoder cache
    (or a KV prefix that starts at the image, which this workload denies) can reuse work."""
    sizes = PRODUCT_PHOTO_SIZES
    photos = [image(f"{seed}:ir:{i}", *sizes[i % len(sizes)]) for i in range(pool)]
    rng = random.Random(f"{seed}:image-reuse")
    weights = [1.0 / (rank + 1) ** zipf_s for rank in range(pool)]
    picks = rng.choices(range(pool), weights=weights, k=requests)
    items = []
    for n, i in enumerate(picks):
        msg = Message("user", (text_of(question_tokens, rng), photos[i]))
        items.append(WorkItem(f"ir-{n}", (msg,), output_tokens, group=f"img{i}"))
    return Workload("image-reuse", items, "cycle", seed)


@_recorded
def multi_turn_document(
    conversations: int = 200,
    turns: int = 6,
    width: int = 1344,
    height: int = 896,
    question_tokens: int = 80,
    answer_tokens: int = 200,
    output_tokens: int = 200,
    seed: int = 0,
) -> Workload:
    """Conversations about one page image; each turn resends the history (the page, earlier
    questions and answers) plus a new question. Turns of different conversations interleave."""
    convs: list[list[WorkItem]] = []
    for c in range(conversations):
        rng = random.Random(f"{seed}:doc:{c}")
        page = image(f"{seed}:doc:{c}", width, height)
        history: list[Message] = []
        items = []
        for t in range(turns):
            question = text_of(question_tokens, rng)
            user = Message("user", (page, question) if t == 0 else (question,))
            history.append(user)
            items.append(WorkItem(f"doc-{c}-{t}", tuple(history), output_tokens, group=f"doc{c}"))
            history.append(Message("assistant", (text_of(answer_tokens, rng),)))
        convs.append(items)
    ordered = [conv[t] for t in range(turns) for conv in convs]
    return Workload("multi-turn-document", ordered, "cycle", seed)


@_recorded
def mixed(
    requests: int = 3000,
    text_only_fraction: float = 0.3,
    max_images: int = 8,
    min_text_tokens: int = 50,
    max_text_tokens: int = 2000,
    min_output_tokens: int = 32,
    max_output_tokens: int = 400,
    seed: int = 0,
) -> Workload:
    """Text-only requests blended with 1..max_images images of varied resolutions, so the cost of
    one request spans two orders of magnitude."""
    shape = _Blend(text_only_fraction, 0.0, 0.0, max_images, (min_text_tokens, max_text_tokens))
    return _blended("mixed", "mx", requests, shape, (min_output_tokens, max_output_tokens), seed)


@_recorded
def mixed_av(
    requests: int = 3000,
    text_only_fraction: float = 0.25,
    video_fraction: float = 0.15,
    audio_fraction: float = 0.2,
    max_images: int = 8,
    min_text_tokens: int = 50,
    max_text_tokens: int = 2000,
    min_output_tokens: int = 32,
    max_output_tokens: int = 400,
    seed: int = 0,
) -> Workload:
    """:func:`mixed` with video and audio (issue 17's text + image + video + audio mix, for a
    model that takes all three): a request is text only, one clip of 4-12 s at 360p or 480p
    (24 fps), one recording of 5-60 s, or 1..max_images images; every item is its request's own."""
    shape = _Blend(
        text_only_fraction, video_fraction, audio_fraction, max_images, (min_text_tokens, max_text_tokens)
    )
    return _blended("mixed-av", "mxav", requests, shape, (min_output_tokens, max_output_tokens), seed)


MIXED_IMAGE_SIZES = [(224, 224), (448, 448), (640, 480), (1024, 768), (1280, 720), (1920, 1080), (2048, 1536)]
MIXED_VIDEO_SIZES = [(640, 360), (854, 480)]


@dataclass(frozen=True)
class _Blend:
    text_only: float
    video: float
    audio: float
    max_images: int
    text_tokens: tuple[int, int]


def _blended(
    name: str, key: str, requests: int, shape: _Blend, output_tokens: tuple[int, int], seed: int
) -> Workload:
    """One draw decides a request's kind (text only, video, audio, else images) so that, with no
    video or audio, the draws are exactly those of the image-only mix."""
    if min(shape.text_only, shape.video, shape.audio) < 0 or shape.text_only + shape.video + shape.audio > 1:
        raise ValueError("text-only, video and audio fractions must be >= 0 and sum to at most 1")
    rng = random.Random(f"{seed}:{name}")
    items = []
    for n in range(requests):
        text = text_of(rng.randint(*shape.text_tokens), rng)
        parts: tuple[MediaSpec, ...] = ()
        kind = rng.random()
        if kind < shape.text_only:
            pass
        elif kind < shape.text_only + shape.video:
            w, h = rng.choice(MIXED_VIDEO_SIZES)
            parts = (video(f"{seed}:{key}:{n}:v", w, h, round(rng.uniform(4.0, 12.0), 1)),)
        elif kind < shape.text_only + shape.video + shape.audio:
            parts = (audio(f"{seed}:{key}:{n}:a", round(rng.uniform(5.0, 60.0), 1)),)
        else:
            k = rng.randint(1, shape.max_images)
            parts = tuple(image(f"{seed}:{key}:{n}:{j}", *rng.choice(MIXED_IMAGE_SIZES)) for j in range(k))
        out = rng.randint(*output_tokens)
        items.append(WorkItem(f"{key}-{n}", (Message("user", (*parts, text)),), out))
    return Workload(name, items, "cycle", seed)


@_recorded
def video_reuse(
    pool: int = 20,
    requests: int = 400,
    zipf_s: float = 1.1,
    width: int = 640,
    height: int = 360,
    min_duration_s: float = 4.0,
    max_duration_s: float = 12.0,
    question_tokens: int = 60,
    output_tokens: int = 100,
    seed: int = 0,
) -> Workload:
    """Short clips reused with Zipf popularity, each under an unrelated question (small scale)."""
    rng = random.Random(f"{seed}:video")
    clips = [
        video(f"{seed}:vid:{i}", width, height, round(rng.uniform(min_duration_s, max_duration_s), 1))
        for i in range(pool)
    ]
    return _reuse("video", clips, requests, zipf_s, question_tokens, output_tokens, rng, seed)


@_recorded
def audio_reuse(
    pool: int = 20,
    requests: int = 400,
    zipf_s: float = 1.1,
    min_duration_s: float = 3.0,
    max_duration_s: float = 20.0,
    question_tokens: int = 60,
    output_tokens: int = 100,
    seed: int = 0,
) -> Workload:
    """Short speech-like clips reused with Zipf popularity, each under an unrelated question."""
    rng = random.Random(f"{seed}:audio")
    clips = [
        audio(f"{seed}:aud:{i}", round(rng.uniform(min_duration_s, max_duration_s), 1)) for i in range(pool)
    ]
    return _reuse("audio", clips, requests, zipf_s, question_tokens, output_tokens, rng, seed)


def _reuse(
    name: str,
    clips: list[MediaSpec],
    requests: int,
    zipf_s: float,
    question_tokens: int,
    output_tokens: int,
    rng: random.Random,
    seed: int,
) -> Workload:
    weights = [1.0 / (rank + 1) ** zipf_s for rank in range(len(clips))]
    picks = rng.choices(range(len(clips)), weights=weights, k=requests)
    items = [
        WorkItem(
            f"{name}-{n}",
            (Message("user", (text_of(question_tokens, rng), clips[i])),),
            output_tokens,
            f"c{i}",
        )
        for n, i in enumerate(picks)
    ]
    return Workload(name, items, "cycle", seed)


@_recorded
def image_heavy(
    requests: int = 2000,
    images: int = 4,
    question_tokens: int = 150,
    output_tokens: int = 200,
    pool: int = 0,
    zipf_s: float = 1.0,
    seed: int = 0,
) -> Workload:
    """Listings or documents with several large photos (1-2.5 MP, :data:`PRODUCT_PHOTO_SIZES`),
    then a short question: the encoder's work is a large part of each prefill. With ``pool`` 0
    every photo is its request's own and no cache can save it (cold), the case encode
    disaggregation is for; with a ``pool`` of photos, each request shows ``images`` different ones
    of them, popularity Zipf(``zipf_s``) (a catalogue whose best sellers appear in many listings):
    an encoder cache that holds a photo saves its encoding for every later request."""
    if pool and pool < images:
        raise ValueError(f"a pool of {pool} photos cannot give a request {images} different ones")
    sizes = PRODUCT_PHOTO_SIZES
    rng = random.Random(f"{seed}:image-heavy")
    photos = [image(f"{seed}:ihp:{i}", *sizes[i % len(sizes)]) for i in range(pool)]
    weights = [1.0 / (rank + 1) ** zipf_s for rank in range(pool)]
    items = []
    for n in range(requests):
        if pool:
            chosen: list[int] = []
            while len(chosen) < images:
                (i,) = rng.choices(range(pool), weights=weights)
                if i not in chosen:
                    chosen.append(i)
            shots = tuple(photos[i] for i in chosen)
        else:
            shots = tuple(image(f"{seed}:ih:{n}:{k}", *sizes[(n + k) % len(sizes)]) for k in range(images))
        msg = Message("user", (*shots, text_of(question_tokens, rng)))
        items.append(WorkItem(f"ih-{n}", (msg,), output_tokens))
    return Workload("image-heavy", items, "cycle", seed)


@_recorded
def image_light(
    requests: int = 2000,
    width: int = 448,
    height: int = 448,
    text_tokens: int = 3000,
    output_tokens: int = 200,
    seed: int = 0,
) -> Workload:
    """One small image (a thumbnail or screenshot, its request's own) under a long text: the
    encoder's share of the prefill is small, so moving it elsewhere saves little and costs a
    transfer."""
    rng = random.Random(f"{seed}:image-light")
    items = []
    for n in range(requests):
        msg = Message("user", (image(f"{seed}:il:{n}", width, height), text_of(text_tokens, rng)))
        items.append(WorkItem(f"il-{n}", (msg,), output_tokens))
    return Workload("image-light", items, "cycle", seed)


@_recorded
def image_mixed(requests: int = 2000, heavy_fraction: float = 0.5, seed: int = 0) -> Workload:
    """Image-light and image-heavy requests interleaved (each request one or the other, seeded,
    ``heavy_fraction`` of them heavy): traffic whose encoder share swings from request to request,
    so no static encode placement suits all of it."""
    if not 0.0 <= heavy_fraction <= 1.0:
        raise ValueError(f"heavy_fraction must be within [0, 1], got {heavy_fraction}")
    heavy = image_heavy(requests=requests, seed=seed).items
    light = image_light(requests=requests, seed=seed).items
    rng = random.Random(f"{seed}:image-mixed")
    items = [heavy[n] if rng.random() < heavy_fraction else light[n] for n in range(requests)]
    return Workload("image-mixed", items, "cycle", seed)


GENERATORS: dict[str, Callable[..., Workload]] = {
    "shared-prefix": shared_prefix,
    "image-reuse": image_reuse,
    "multi-turn-document": multi_turn_document,
    "mixed": mixed,
    "mixed-av": mixed_av,
    "video": video_reuse,
    "audio": audio_reuse,
    "image-heavy": image_heavy,
    "image-light": image_light,
    "image-mixed": image_mixed,
}


def build(name: str, seed: int = 0, **overrides: Any) -> Workload:
    """A workload by name with keyword overrides of its defaults (unknown keys are an error)."""
    try:
        gen = GENERATORS[name]
    except KeyError:
        raise ValueError(f"unknown workload {name!r}; choose one of: {', '.join(GENERATORS)}") from None
    return gen(seed=seed, **overrides)


PROMPT_ORDERS = ("mmgate", "inference-perf")
"""How a ladder draws a workload's prompts; every order runs all rungs on one fleet, so caches
carry from one rate to the next:

- ``mmgate``: the workload's own order (``random``: uniform draws with replacement; ``cycle``:
  generation order, repeated);
- ``inference-perf``: as inference-perf's load generator does, one seeded shuffle of the whole
  prompt list, cycled across every stage, so each prompt comes back once per pass through it.
"""


def in_prompt_order(workload: Workload, order: str, seed: int = 0) -> Workload:
    """``workload`` drawn in ``order`` (one of :data:`PROMPT_ORDERS`); ValueError for another."""
    if order == "mmgate":
        return workload
    if order != "inference-perf":
        raise ValueError(f"unknown prompt order {order!r}; choose one of: {', '.join(PROMPT_ORDERS)}")
    items = list(workload.items)
    random.Random(f"{seed}:{workload.name}:inference-perf").shuffle(items)
    return replace(workload, items=items, order="cycle", params={**workload.params, "prompt_order": order})


def scaled(workload: Workload, max_items: int) -> Workload:
    """The first ``max_items`` items (for quick runs); draw order and seed are kept."""
    return replace(workload, items=workload.items[:max_items])


# --- JSONL export and replay --------------------------------------------------------------------


def export_jsonl(
    workload: Workload,
    path: Path,
    n: int | None = None,
    model: str = DEFAULT_MODEL,
    media: MediaCache | None = None,
) -> int:
    """Write ``n`` requests in draw order (default: every item once) as OpenAI chat bodies."""
    cache = media or MediaCache()
    items = workload.take(n) if n is not None else list(workload.items)
    with path.open("w") as f:
        for item in items:
            f.write(json.dumps(item.body(cache, model=model), separators=(",", ":")) + "\n")
    return len(items)


@dataclass(frozen=True, slots=True)
class RawItem:
    """A request replayed verbatim from JSONL: the body is sent as is; its view comes from the
    request parser (the same code the gateway runs)."""

    id: str
    raw: bytes
    output_tokens: int

    def body_bytes(self) -> bytes:
        return self.raw

    def view(self, model: str = DEFAULT_MODEL) -> RequestView:
        parse = importlib.import_module("mmgate.request").parse_request  # the gateway's own parser
        view: RequestView = parse(self.raw, {"content-type": "application/json"})
        return view


def load_jsonl(path: Path) -> list[RawItem]:
    """Requests from a JSONL file, one OpenAI body per line; blank lines are skipped."""
    items = []
    for n, line in enumerate(path.read_text().splitlines()):
        if not line.strip():
            continue
        body = json.loads(line)
        if not isinstance(body, dict):
            raise ValueError(f"{path}:{n + 1}: expected a JSON object per line")
        tokens = body.get("max_tokens") or body.get("max_completion_tokens") or 0
        items.append(RawItem(f"jsonl-{n}", line.encode(), int(tokens)))
    return items


def shuffled_replay(items: Sequence[RawItem], seed: int = 0) -> list[RawItem]:
    """Replayed requests in inference-perf's order: one seeded shuffle, then cycled by the caller."""
    out = list(items)
    random.Random(f"{seed}:replay:inference-perf").shuffle(out)
    return out
