"""The API server's front-end work on a request, and each pod's backlog of it.

Before a vLLM engine sees a multimodal request, the pod's API server loads every media item
(base64 decode, content hash, image or video frame decode) and runs the HF processor on each
item its processor cache does not hold (an audio clip is padded to the processor's 300-s window
before its spectrogram). That happens in the API-server process, one request after another, so
under load requests queue there — in no scraped queue (``vllm:num_requests_waiting`` counts the
engine's) and in none of the gateway's token counts. A 10-s 480p clip costs about 0.4 s of it; a
text-only request placed behind it waits that long for a GPU that may be idle.

:class:`FrontendPricer` prices a request's front-end seconds from what the gateway parsed and
priced, per item::

    seconds = item_s + token_s * tokens + mib_s * (payload MiB as sent, inline only)
                     + megapixel_s * (decoded megapixels, probed images only)

with rates per modality (:class:`FrontendRates`). :class:`FrontendQueue` is one pod's front end
as the gateway has loaded it: work placed there drains at one second per second (one API-server
process, vLLM's default), and a request's share is released when its first token shows its front
end is long done. Both are pure: the clock is passed in.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import msgspec

from mmgate.request.view import MediaAsset, Modality, Source
from mmgate.tokens.sequence import MMItem

_MIB = float(1 << 20)


class FrontendRates(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Seconds of API-server work for one media item of a modality (see the module docstring)."""

    itemSeconds: float = 0.0
    tokenSeconds: float = 0.0
    mibSeconds: float = 0.0
    megapixelSeconds: float = 0.0

    def check(self, where: str) -> None:
        for field in self.__struct_fields__:
            value = getattr(self, field)
            if not value >= 0:
                raise ValueError(f"{where}.{field} must be >= 0, got {value}")


LOAD_ITEM_S = 0.674e-3
"""Per item: parsing the part and opening the file (``mmgate bench media-load``, this project's
2-core x86 CPU; the simulator's ``MediaLoad.per_item_ms``)."""
LOAD_MIB_S = (0.0928 + 0.3048 * 0.75) * 1e-3
"""Per MiB of base64 as sent: its decode (0.0928 ms/MiB) and the blake3 hash of the file bytes, 3/4
of it (0.3048 ms/MiB), measured as above (``MediaLoad``)."""

DEFAULT_FRONTEND: dict[str, FrontendRates] = {
    # JPEG decode 5.694 ms/MP (measured, MediaLoad); Qwen2-VL-style processor 1.5 ms + 5.67 us a token
    "image": FrontendRates(LOAD_ITEM_S + 1.5e-3, 5.67e-6, LOAD_MIB_S, 5.694e-3),
    # the processor per frame pair and the clip's frame decode, 74 us a token together
    "video": FrontendRates(LOAD_ITEM_S + 1.5e-3, 74.0e-6, LOAD_MIB_S),
    # the spectrogram over the padded 300-s window: 50 ms whatever the clip's length
    "audio": FrontendRates(LOAD_ITEM_S + 50.0e-3, 0.0, LOAD_MIB_S),
}
"""The simulator's ``qwen2.5-omni-7b-h100`` front end (estimates for a server CPU, documented in
that profile and docs/sim.md), which the measured media-load costs above are part of."""


def default_frontend() -> dict[str, FrontendRates]:
    return dict(DEFAULT_FRONTEND)


class FrontendPricer:
    """A request's front-end seconds: each modality's rates applied to its media items. A
    modality without rates (precomputed embeddings, documents unless configured) costs nothing."""

    __slots__ = ("_rates",)

    def __init__(self, rates: Mapping[str, FrontendRates]) -> None:
        known = {m.value for m in Modality}
        table: dict[Modality, FrontendRates] = {}
        for modality, spec in rates.items():
            if modality not in known:
                raise ValueError(f"frontEnd: unknown modality {modality!r} (one of {sorted(known)})")
            spec.check(f"frontEnd.{modality}")
            if any(getattr(spec, f) for f in spec.__struct_fields__):
                table[Modality(modality)] = spec
        self._rates = table

    @property
    def enabled(self) -> bool:
        """Whether any modality costs front-end time."""
        return bool(self._rates)

    def seconds(self, assets: Iterable[MediaAsset], items: Iterable[MMItem]) -> float:
        """Front-end seconds of a request with media parts ``assets`` (what is loaded: payload
        bytes, pixels) and priced items ``items`` (what the processor runs on: tokens). A part
        that names a cached item by uuid alone carries nothing to load."""
        rates = self._rates
        if not rates:
            return 0.0
        total = 0.0
        for asset in assets:
            r = rates.get(asset.modality)
            if r is None or asset.source is Source.UUID:
                continue
            total += r.itemSeconds
            if asset.source is Source.INLINE:
                total += r.mibSeconds * asset.payload_size / _MIB
            if r.megapixelSeconds and asset.modality is Modality.IMAGE and asset.width and asset.height:
                total += r.megapixelSeconds * asset.width * asset.height / 1e6
        for item in items:
            r = rates.get(item.modality)
            if r is not None:
                total += r.tokenSeconds * item.length
        return total


class FrontendQueue:
    """One pod's front end as this gateway loaded it: ``until`` is when the work placed there
    would be through, draining one second per second from each placement (``max(now, until) +
    seconds``, a single worker in arrival order); ``held`` the seconds of requests placed there
    whose first token has not come. Its backlog is the smaller of the two: the clock's estimate,
    capped by what is provably not through yet (a request with a first token left the front end
    long ago), so a front end slower than priced is not believed busy for ever."""

    __slots__ = ("held", "until")

    def __init__(self) -> None:
        self.until = 0.0
        self.held = 0.0

    def backlog(self, now: float) -> float:
        """Seconds of placed front-end work not yet through at ``now`` (never negative)."""
        left = self.until - now
        if left <= 0.0:
            return 0.0
        held = self.held
        return left if left < held else held

    def place(self, seconds: float, now: float) -> None:
        """A request with ``seconds`` of front-end work was sent here at ``now``."""
        if seconds <= 0.0:
            return
        until = self.until
        self.until = (until if until > now else now) + seconds
        self.held += seconds

    def release(self, seconds: float) -> None:
        """A request placed with ``seconds`` is past its front end (first token, end, failure)."""
        held = self.held - seconds
        self.held = held if held > 1e-12 else 0.0
