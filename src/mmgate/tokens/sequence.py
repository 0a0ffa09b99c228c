"""The deterministic pseudo-token sequence of a request, shared by the simulator and the scheduler.

Text is packed four UTF-8 bytes per little-endian uint32 pseudo-token, as llm-d's estimate backend
does; before each media item the byte stream is zero-padded to a token boundary and the item
occupies ``tokens + extra_tokens`` copies of one id derived from its identity (low 32 bits of
xxh64(identity)). Equal prompts give equal sequences on every process, a changed image changes
only its own span, and each span is recorded as an :class:`MMItem` so block hashing can add
vLLM's ``("mm", identity, offset)`` extra keys.
"""

from __future__ import annotations

import struct
import sys
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import msgspec
import xxhash

from mmgate.request.view import MediaAsset, Modality, RequestView
from mmgate.tokens.pricing import AssetPrice, Pricing, PricingConfig, price, priced
from mmgate.tokens.text import BYTES_PER_TOKEN, estimate_runs


class MMItem(msgspec.Struct, frozen=True):
    """One media item's span in a token sequence. (A frozen msgspec struct, not a frozen
    dataclass: every request with media makes one per item, and a frozen dataclass's
    ``__init__`` costs ten times as much.)"""

    identity: str
    modality: Modality
    offset: int  # index of the item's first token in ``token_ids``
    length: int  # tokens + extra_tokens of its price


@dataclass(slots=True)
class TokenSequence:
    token_ids: list[int]
    mm_items: list[MMItem]

    def __len__(self) -> int:
        return len(self.token_ids)


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


class TokenStream(msgspec.Struct):
    """The same sequence as :func:`build_sequence`, kept as little-endian uint32 bytes.

    Block hashing reads bytes, so the scheduler builds this form directly instead of packing the
    text into thousands of ints and back. ``token_ids`` is a zero-copy integer view of it.
    """

    data: bytes
    mm_items: list[MMItem]

    def __len__(self) -> int:
        return len(self.data) // BYTES_PER_TOKEN

    @property
    def token_ids(self) -> Sequence[int]:
        if _NATIVE_LE:
            return memoryview(self.data).cast("I")
        ids = array("I", self.data)
        ids.byteswap()
        return ids


_NATIVE_LE = sys.byteorder == "little" and array("I").itemsize == BYTES_PER_TOKEN
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
    for part in view.parts:
        if isinstance(part, str):
            text = part.encode()
            pieces.append(text)
            size += len(text)
            if counted:
                run.append(part)
            continue
        a = price_asset(part, model)
        length = a.tokens + a.extra_tokens
        media += length
        if media > limit:
            price(view, config)  # refuses it with the whole count, before any media bytes are made
            raise AssertionError("price() refuses a request over max_total_tokens")  # pragma: no cover
        assets.append(a)
        if pad := -size % BYTES_PER_TOKEN:
            pieces.append(_PADS[pad])
            size += pad
        items.append(MMItem(part.identity, part.modality, size // BYTES_PER_TOKEN, length))
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
    return priced(view, config, text_tokens, assets), TokenStream(b"".join(pieces), items)
