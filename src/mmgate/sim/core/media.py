"""The API server's front-end work on each media item before the HF processor sees it: base64
decode, content hash and image decode (:class:`~mmgate.sim.profiles.MediaLoad` has the model and
where its constants come from).

:func:`payloads_of` reads what the server must load from the parsed request (the same
:class:`~mmgate.request.view.MediaAsset` the gateway reads); :func:`load_ms` prices one item,
:func:`decode_ms` and :func:`hash_ms` its two parts: vLLM decodes on its media-loading threads
and hashes in the multimodal processor (:mod:`mmgate.sim.core.frontend`).
"""

from __future__ import annotations

from collections.abc import Sequence

from mmgate.request.view import MediaAsset, Modality, Source
from mmgate.sim.core.types import MediaPayload
from mmgate.sim.profiles import MediaLoad

_MIB = float(1 << 20)


def payloads_of(assets: Sequence[MediaAsset]) -> tuple[MediaPayload, ...]:
    """One payload per media part (repeats included: each part is loaded), none for a part that
    names a cached item by uuid only (vLLM's cached-item form carries no bytes to load); a part
    with a uuid and its bytes is loaded but not hashed."""
    out = []
    for a in assets:
        if a.source is Source.UUID:
            continue
        inline = a.source is Source.INLINE
        b64 = a.payload_size if inline else 0
        pixels = (a.width or 0) * (a.height or 0) if a.modality is Modality.IMAGE else 0
        out.append(
            MediaPayload(
                modality=a.modality.value,
                base64_bytes=b64,
                file_bytes=b64 * 3 // 4,
                pixels=pixels,
                fmt=a.detected_format or "",
                url=a.source is Source.URL,
                hashed=not a.client_uuid,
            )
        )
    return tuple(out)


def load_ms(cost: MediaLoad, item: MediaPayload) -> float:
    """Milliseconds the API server spends loading ``item`` (see :class:`MediaLoad`): its
    decode and its hash."""
    return decode_ms(cost, item) + hash_ms(cost, item)


def hash_ms(cost: MediaLoad, item: MediaPayload) -> float:
    """The content hash of ``item``'s file bytes (none when the part carries a uuid: vLLM takes
    it as the item's hash, ``multi_modal_uuids``)."""
    return cost.hash_ms_per_mib * item.file_bytes / _MIB if item.hashed else 0.0


def decode_ms(cost: MediaLoad, item: MediaPayload) -> float:
    """``item``'s load without its hash: the part, the base64 text, a URL fetch, the image."""
    ms = cost.per_item_ms
    ms += cost.base64_ms_per_mib * item.base64_bytes / _MIB
    if item.url:
        ms += cost.url_fetch_ms
    if item.pixels:
        rate = cost.decode_ms_per_megapixel.get(item.fmt, cost.other_decode_ms_per_megapixel)
        ms += rate * item.pixels / 1e6
    return ms
