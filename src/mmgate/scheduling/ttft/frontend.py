"""The API server's front-end work on a request, and each pod's backlog of it.

Before a vLLM engine sees a multimodal request, the pod's API server works on it in two stages:

1. **loading**: each media part is decoded (base64, the image, a clip's frames) on a pool of
   threads (``VLLM_MEDIA_LOADING_THREAD_COUNT``, 8), so the parts of several requests load at
   once and a request's load takes about as long as its largest part;
2. **the multimodal processor**: the content hash and the HF processor on each item (an audio clip
   is padded to the processor's 300-s window before its spectrogram), on one single-thread
   executor, so multimodal requests queue there one after another.

That queue is in no scraped metric (``vllm:num_requests_waiting`` counts the engine's) and in
none of the gateway's token counts. A request without media enters neither stage (vLLM tokenizes
on its own pool).

:class:`FrontendPricer` prices a request's two stages from what the gateway parsed and priced,
per item of each modality, with each stage's rates (:class:`StageRates`)::

    seconds = item_s + token_s * tokens + mib_s * (payload MiB as sent, inline only)
                     + megapixel_s * (decoded megapixels, probed images only)

(the load: the largest part's; the processor: their sum). :class:`FrontendQueue` is one pod's
processor as the gateway has loaded it: work placed there drains at one second per second from
when its load is done, and a first token earlier than the clock expected moves the rest up. A
request with processor work waits ``max(load, backlog) + processor``. Both classes are pure: the
clock is passed in. The per-request arithmetic (:func:`~mmgate.scheduling.ttft._frontend.frontend_seconds`)
and :class:`FrontendQueue` live in :mod:`mmgate.scheduling.ttft._frontend`, which mypyc compiles
(this module's ``msgspec`` structs keep it from being compiled); they are re-exported here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import msgspec

from mmgate.request.view import MediaAsset, Modality
from mmgate.scheduling.ttft._frontend import (
    NO_FRONTEND,
    Flat,
    FrontendQueue,
    FrontendSeconds,
    frontend_seconds,
)
from mmgate.tokens.sequence import MMItem

__all__ = [
    "DEFAULT_FRONTEND",
    "NO_FRONTEND",
    "FrontendPricer",
    "FrontendQueue",
    "FrontendRates",
    "FrontendSeconds",
    "StageRates",
    "default_frontend",
]

_MIB = float(1 << 20)


class StageRates(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Seconds of one front-end stage for one media item of a modality (module docstring)."""

    itemSeconds: float = 0.0
    tokenSeconds: float = 0.0
    mibSeconds: float = 0.0
    megapixelSeconds: float = 0.0

    def check(self, where: str) -> None:
        for field in self.__struct_fields__:
            value = getattr(self, field)
            if not value >= 0:
                raise ValueError(f"{where}.{field} must be >= 0, got {value}")

    @property
    def zero(self) -> bool:
        return not (self.itemSeconds or self.tokenSeconds or self.mibSeconds or self.megapixelSeconds)


class FrontendRates(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A modality's front-end rates: ``load`` on the loading threads, ``processor`` on the one
    processor worker."""

    load: StageRates = StageRates()
    processor: StageRates = StageRates()


LOAD_ITEM_S = 0.674e-3
"""Per part: parsing it and opening the file (``mmgate bench media-load`` on this project's 2-core
x86 CPU; the simulator's ``MediaLoad.per_item_ms``)."""
BASE64_MIB_S = 0.0928e-3
"""Per MiB of base64 as sent: its decode, measured as above."""
HASH_MIB_S = 0.3048e-3 * 0.75
"""Per MiB of base64 as sent: the blake3 hash of the file bytes (3/4 of it, 0.3048 ms/MiB), as above."""

DEFAULT_FRONTEND: dict[str, FrontendRates] = {
    # JPEG decode 5.694 ms/MP (measured); Qwen2-VL-style processor 1.5 ms + 5.67 us a token
    "image": FrontendRates(
        StageRates(LOAD_ITEM_S, 0.0, BASE64_MIB_S, 5.694e-3), StageRates(1.5e-3, 5.67e-6, HASH_MIB_S)
    ),
    # the clip's frame decode, 62.7 us a token; the processor per frame pair, 11.34 us a token
    "video": FrontendRates(
        StageRates(LOAD_ITEM_S, 62.7e-6, BASE64_MIB_S), StageRates(1.5e-3, 11.34e-6, HASH_MIB_S)
    ),
    # the spectrogram over the padded 300-s window: 50 ms whatever the clip's length
    "audio": FrontendRates(StageRates(LOAD_ITEM_S, 0.0, BASE64_MIB_S), StageRates(50.0e-3, 0.0, HASH_MIB_S)),
}
"""The simulator's ``qwen2.5-omni-7b-h100`` front end (estimates for a server CPU, documented in
that profile and docs/sim.md), which the measured media-load costs above are part of."""


def default_frontend() -> dict[str, FrontendRates]:
    return dict(DEFAULT_FRONTEND)


def _flat(r: FrontendRates) -> Flat:
    lo, pr = r.load, r.processor
    return Flat(
        lo.itemSeconds,
        lo.mibSeconds / _MIB,
        lo.megapixelSeconds / 1e6,
        lo.tokenSeconds,
        pr.itemSeconds,
        pr.mibSeconds / _MIB,
        pr.megapixelSeconds / 1e6,
        pr.tokenSeconds,
    )


class FrontendPricer:
    """A request's front-end seconds: each modality's rates applied to its media items. A
    modality without rates (precomputed embeddings, documents unless configured) costs nothing."""

    __slots__ = ("_rates",)

    def __init__(self, rates: Mapping[str, FrontendRates]) -> None:
        known = {m.value for m in Modality}
        table: dict[Modality, Flat] = {}
        for modality, spec in rates.items():
            if modality not in known:
                raise ValueError(f"frontEnd: unknown modality {modality!r} (one of {sorted(known)})")
            spec.load.check(f"frontEnd.{modality}.load")
            spec.processor.check(f"frontEnd.{modality}.processor")
            if not (spec.load.zero and spec.processor.zero):
                table[Modality(modality)] = _flat(spec)
        self._rates = table

    @property
    def enabled(self) -> bool:
        """Whether any modality costs front-end time."""
        return bool(self._rates)

    @property
    def table(self) -> dict[Modality, Flat]:
        """The checked rates flattened per modality, for :func:`frontend_seconds` (the compiled
        producer calls it with this table directly: a call into this class's Python method costs
        more than the pricing). Not to be changed."""
        return self._rates

    def seconds(self, parts: Iterable[str | MediaAsset], items: Iterable[MMItem]) -> FrontendSeconds:
        """The front end of a request with prompt parts ``parts`` (its media parts are what is
        loaded: payload bytes, pixels; text parts are passed over) and priced items ``items``
        (tokens): :func:`~mmgate.scheduling.ttft._frontend.frontend_seconds` at these rates."""
        return frontend_seconds(self._rates, parts, items)
