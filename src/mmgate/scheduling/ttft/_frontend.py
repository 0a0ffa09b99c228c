"""The front end's per-request arithmetic and the pods' processor queues, compiled with mypyc.

:mod:`mmgate.scheduling.ttft.frontend` holds the configuration (``msgspec`` structs, which mypyc
does not compile) and :class:`~mmgate.scheduling.ttft.frontend.FrontendPricer`, which checks and
flattens it; the pricing of one request and :class:`FrontendQueue` live here so that the
predicted-TTFT producer, compiled too, calls them natively on every decision: as plain Python
the pricing was a method call into the interpreter (about 25k instructions of a 85k-instruction
``produce`` at 8 endpoints, three images), and each queue's ``until`` a generic attribute read
per candidate. The module is listed in :data:`mmgate.compiled.MODULES` and runs as plain Python
as well; both give the same seconds bit for bit (the same operations in the same order).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from mmgate.request.view import MediaAsset, Modality, Source
from mmgate.tokens.sequence import MMItem


class Flat:
    """A modality's rates flattened for the per-request loop: per item, per byte, per pixel and
    per token of the load, then of the processor. A class, not a tuple: compiled, its fields
    are plain C doubles, where a tuple's eight would be type-checked and unboxed on every read
    of the table."""

    __slots__ = (
        "load_byte",
        "load_item",
        "load_pixel",
        "load_token",
        "proc_byte",
        "proc_item",
        "proc_pixel",
        "proc_token",
    )

    def __init__(
        self,
        load_item: float,
        load_byte: float,
        load_pixel: float,
        load_token: float,
        proc_item: float,
        proc_byte: float,
        proc_pixel: float,
        proc_token: float,
    ) -> None:
        self.load_item = load_item
        self.load_byte = load_byte
        self.load_pixel = load_pixel
        self.load_token = load_token
        self.proc_item = proc_item
        self.proc_byte = proc_byte
        self.proc_pixel = proc_pixel
        self.proc_token = proc_token


FrontendSeconds = tuple[float, float, dict[str, float]]
"""A request's front end: (load: its largest part's, the parts load at once; processor: all its
items', one after another; skipped: per item identity, the processor seconds a processor-cache
hit on it saves, all but its hash). A plain tuple: a NamedTuple's constructor is Python code, and
this is built once per decision."""

NO_FRONTEND: Final[FrontendSeconds] = (0.0, 0.0, {})

# Enum members read once (off the class each read costs ~0.3 us on CPython 3.11); ``Final`` so
# the compiled module keeps them in C statics rather than reading its globals dict.
_UUID: Final = Source.UUID
_INLINE: Final = Source.INLINE
_IMAGE: Final = Modality.IMAGE


def frontend_seconds(
    rates: dict[Modality, Flat], parts: Iterable[str | MediaAsset], items: Iterable[MMItem]
) -> FrontendSeconds:
    """The front end of a request with prompt parts ``parts`` (its media parts are what is
    loaded: payload bytes, pixels; text parts are passed over) and priced items ``items``
    (tokens), at ``rates`` per modality (:attr:`FrontendPricer.table
    <mmgate.scheduling.ttft.frontend.FrontendPricer.table>`). A part that names a cached item by
    uuid alone carries nothing to load or hash. (Once per request with media, on the decision
    path: one pass over each, locals only.)"""
    if not rates:
        return NO_FRONTEND
    load = processor = 0.0
    skipped: dict[str, float] = {}
    for asset in parts:
        if isinstance(asset, str):
            continue
        modality = asset.modality
        r = rates.get(modality)
        if r is None:
            continue
        source = asset.source
        if source is _UUID:
            continue
        part = r.load_item
        fixed = r.proc_item
        if source is _INLINE:
            size = asset.payload_size
            part += r.load_byte * size
            processor += r.proc_byte * size  # the hash: paid on a processor-cache hit too
        if (r.load_pixel or r.proc_pixel) and modality is _IMAGE:
            width, height = asset.width, asset.height
            if width and height:
                pixels = width * height
                part += r.load_pixel * pixels
                fixed += r.proc_pixel * pixels
        if part > load:
            load = part
        processor += fixed
        identity = asset.identity
        skipped[identity] = skipped.get(identity, 0.0) + fixed
    longest = 0.0
    for item in items:
        r = rates.get(item.modality)
        if r is not None:
            length = item.length
            own = r.proc_token * length
            processor += own
            identity = item.identity
            skipped[identity] = skipped.get(identity, 0.0) + own
            part = r.load_token * length
            if part > longest:
                longest = part
    return load + longest, processor, skipped


class FrontendQueue:
    """One pod's processor as this gateway loaded it: ``until`` is when the work placed there
    would be through, each request starting once its media are loaded and the work ahead of it is
    done (``max(ready, until) + seconds``, one worker in order). A first token proves its
    request went through, so when one comes before the end the clock gave that request, the
    processor is faster than priced and everything behind it moves up by the difference: a front
    end faster than priced is not believed busy for ever."""

    __slots__ = ("until",)

    def __init__(self) -> None:
        self.until = 0.0

    def backlog(self, now: float) -> float:
        """Seconds until the work placed here is through, at ``now`` (never negative)."""
        left = self.until - now
        return left if left > 0.0 else 0.0

    def place(self, seconds: float, ready: float) -> float:
        """A request with ``seconds`` of processor work, its media loaded at ``ready``, was sent
        here; returns when the clock expects it through."""
        until = self.until
        end = self.until = (until if until > ready else ready) + seconds
        return end

    def through(self, end: float, now: float) -> None:
        """The request the clock expected through at ``end`` had its first token at ``now``."""
        early = end - now
        if early > 0.0:
            until = self.until - early
            self.until = until if until > now else now
