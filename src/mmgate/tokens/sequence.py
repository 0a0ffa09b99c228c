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
from dataclasses import dataclass

import xxhash

from mmgate.request.view import Modality, RequestView
from mmgate.tokens.pricing import Pricing
from mmgate.tokens.text import BYTES_PER_TOKEN


@dataclass(frozen=True, slots=True)
class MMItem:
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


def build_sequence(view: RequestView, pricing: Pricing) -> TokenSequence:
    """Lay out ``view`` as pseudo-tokens, each media item as long as ``pricing`` says.

    ``pricing`` must come from ``price(view, ...)``: its assets are matched to the view's media
    parts in order. A completions request with token ids uses those ids as the text.
    """
    media = [p for p in view.parts if not isinstance(p, str)]
    if len(media) != len(pricing.assets):
        raise ValueError(
            f"pricing has {len(pricing.assets)} assets but the request has {len(media)} media parts"
        )
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
