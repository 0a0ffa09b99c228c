"""The deterministic pseudo-token sequence of a request, shared by the simulator and the scheduler.

Text is packed four UTF-8 bytes per little-endian uint32 pseudo-token, as llm-d's estimate backend
does; before each media item the byte stream is zero-padded to a token boundary and the item
occupies ``tokens + extra_tokens`` copies of one id derived from its identity (low 32 bits of
xxh64(identity)). Equal prompts give equal sequences on every process, a changed image changes
only its own span, and each span is recorded as an :class:`MMItem` so block hashing can add
vLLM's ``("mm", identity, offset)`` extra keys.

mypyc compiles this module (:mod:`mmgate.compiled`): the scheduler's token producer lays out
every request with :func:`price_stream`, a loop of small integer and list operations over the
parts. Its types (:class:`MMItem`, :class:`TokenSequence`, :class:`TokenStream`) live in
:mod:`mmgate.tokens._streams`, uncompiled, and are re-exported here.
"""

from __future__ import annotations

import struct
from functools import lru_cache

import xxhash

from mmgate.request.view import MediaAsset, Modality, RequestView
from mmgate.tokens._streams import MMItem, TokenSequence, TokenStream
from mmgate.tokens.pricing import AssetPrice, Pricing, PricingConfig, price, priced
from mmgate.tokens.text import BYTES_PER_TOKEN, estimate_runs

__all__ = [
    "MEDIA_UNITS",
    "MMItem",
    "TokenSequence",
    "TokenStream",
    "build_sequence",
    "media_token_id",
    "price_stream",
]


def media_token_id(identity: str) -> int:
    """The pseudo-token id every position of a media item carries."""
    return xxhash.xxh64_intdigest(identity.encode()) & 0xFFFFFFFF


def _pack(buf: bytearray, out: list[int]) -> None:
    if pad := -len(buf) % BYTES_PER_TOKEN:
        buf.extend(bytes(pad))
    if buf:
        out.extend(struct.unpack(f"<{len(buf) // BYTES_PER_TOKEN}I", buf))
        buf.clear()


def _check(view: RequestView, pricing: Pricing) -> list[MediaAsset]:
    media = [p for p in view.parts if not isinstance(p, str)]
    if len(media) != len(pricing.assets):
        raise ValueError(
            f"pricing has {len(pricing.assets)} assets but the request has {len(media)} media parts"
        )
    return media


def build_sequence(view: RequestView, pricing: Pricing) -> TokenSequence:
    """Lay out ``view`` as pseudo-tokens, each media item as long as ``pricing`` says.

    ``pricing`` must come from ``price(view, ...)``: its assets are matched to the view's media
    parts in order. A completions request with token ids uses those ids as the text.
    """
    _check(view, pricing)
    out: list[int] = list(view.prompt_token_ids) if view.prompt_token_ids is not None else []
    items: list[MMItem] = []
    buf = bytearray()
    i = 0
    for part in view.parts:
        if isinstance(part, str):
            buf += part.encode()
            continue
        _pack(buf, out)
        price = pricing.assets[i]
        i += 1
        length = price.tokens + price.extra_tokens
        items.append(MMItem(part.identity, part.modality, len(out), length))
        out.extend([media_token_id(part.identity)] * length)
    _pack(buf, out)
    return TokenSequence(out, items)


_pack_id = struct.Struct("<I").pack
_PADS = (b"", b"\0", b"\0\0", b"\0\0\0")  # zero bytes up to the next token boundary
MEDIA_UNITS = 4096  # media identities whose token bytes are remembered (popular images recur)


@lru_cache(maxsize=MEDIA_UNITS)
def _media_unit(identity: str) -> bytes:
    """One position of a media item's span, as stream bytes."""
    return _pack_id(media_token_id(identity))


def price_stream(view: RequestView, config: PricingConfig) -> tuple[Pricing, TokenStream]:
    """``price(view, config)`` and :func:`build_sequence` as bytes, in one pass over the parts:
    what the scheduler's token producer needs for a text prompt (token-id prompts use
    :func:`build_sequence`).

    Each media part is priced where it is laid out, so the parts are walked once, not three
    times (split, price, lay out). The text count is the stream's text positions, which is
    exactly the bytes/4 estimate of :func:`~mmgate.tokens.text.estimate_runs` (each run padded
    to a whole token before a media item); with a tokenizer the runs are collected for it. A
    request whose media alone is over ``max_total_tokens`` is refused by :func:`price` before
    any media bytes are made.
    """
    if view.prompt_token_ids is not None:
        raise ValueError("price_stream lays out text prompts; use build_sequence for token ids")
    resolved = config.resolved
    price_asset = resolved.price_asset
    model = view.model
    limit = config.max_total_tokens
    counted = resolved.text is not estimate_runs  # a tokenizer counts the runs themselves
    runs: list[str] = []
    run: list[str] = []
    assets: list[AssetPrice] = []
    pieces: list[bytes] = []
    items: list[MMItem] = []
    size = 0  # bytes so far, always a whole number of tokens before a media item
    media = 0  # media positions so far
    by_modality: dict[Modality, int] = {}  # as priced() sums them: media positions per modality
    for part in view.parts:
        if isinstance(part, str):
            text = part.encode()
            pieces.append(text)
            size += len(text)
            if counted:
                run.append(part)
            continue
        mod = part.modality
        a = price_asset(part, model)  # a recurring image's kept price (Resolved.price_asset)
        length = a.tokens + a.extra_tokens
        media += length
        by_modality[mod] = by_modality.get(mod, 0) + length
        if media > limit:
            price(view, config)  # refuses it with the whole count, before any media bytes are made
            raise AssertionError("price() refuses a request over max_total_tokens")  # pragma: no cover
        assets.append(a)
        if pad := -size % BYTES_PER_TOKEN:
            pieces.append(_PADS[pad])
            size += pad
        items.append(MMItem(part.identity, mod, size // BYTES_PER_TOKEN, length))
        pieces.append(_media_unit(part.identity) * length)
        size += BYTES_PER_TOKEN * length
        if run:
            runs.append("".join(run))
            run.clear()
    if pad := -size % BYTES_PER_TOKEN:
        pieces.append(_PADS[pad])
        size += pad
    if run:
        runs.append("".join(run))
    text_tokens = resolved.text(runs) if counted else size // BYTES_PER_TOKEN - media
    total = text_tokens + media
    # The Pricing priced() makes, from the sums made above (priced() would loop the assets again);
    # over the limit it is priced() that refuses, so the message is the one price() gives.
    if total > limit:
        priced(view, config, text_tokens, assets)
        raise AssertionError("priced() refuses a request over max_total_tokens")  # pragma: no cover
    return Pricing(text_tokens, assets, total, by_modality), TokenStream(b"".join(pieces), items)
