"""Which encoder of the encode tier gets each media item of a request.

An item is cached on the encoder that encoded it (vLLM's encoder cache, keyed by the item's content
identity), so the choice is cache-affine first and load-balancing second; the tie-break is a hash,
so every gateway replica and sidecar makes the same choice without talking to each other. The
encoder routing-header handler (``encoder-header-handler``) calls this on every E/PD decision.
Nothing here does I/O.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Mapping, Sequence
from functools import lru_cache
from itertools import repeat

LOCAL = "local"
"""The routing-header entry of a media item the serving pod encodes itself (``adaptive-encode-decider``
splitting a request's items): mmgate's orchestration sends it no encode leg, so the serving pod
gets no encoder output for it and encodes it. Not a ``host:port``: llm-d's sidecar does not know
it, so a config that splits is for mmgate's orchestration (gateway mode or ``mmgate sidecar``)."""


def assign_encoders(
    identities: Sequence[str],
    encoders: Mapping[str, float],
    *,
    holders: Sequence[Collection[str]] = (),
) -> dict[str, str]:
    """The encoder for each distinct item, by identity, in the items' order. ``encoders`` maps each
    encoder of the pool to its load (queue depth, in-flight requests); ``holders``, aligned with
    ``identities`` when given, names the encoders believed to hold each item in their encoder cache.

    An item goes to an encoder believed to hold it (the least loaded one if several do); a cold
    item goes to the least loaded encoder, counting the items this request already gave each one,
    so the items of one request spread over the pool and encode in parallel. Ties are broken by
    rendezvous hashing of (item, encoder): stable, the same on every replica and sidecar, so a
    cold item that two requests carry at once lands on one encoder.
    """
    if not encoders:
        raise ValueError("no encoder to assign items to")
    out: dict[str, str] = {}
    given: dict[str, int] | None = None  # items given to each encoder, counted once a load matters
    # On the request path (the routing header of every E/PD decision): one pass per item, and
    # nothing made for the usual item of a warm fleet, held by exactly one encoder of the pool
    # (each item is recorded on the one encoder it was planned for).
    for identity, held in zip(identities, holders or repeat((), len(identities)), strict=True):
        if len(held) == 1:
            (best,) = held
            if best in encoders:
                out[identity] = best
                if given is not None:
                    given[best] = given.get(best, 0) + 1
                continue
        if given is None:
            given = {}
            for e in out.values():
                given[e] = given.get(e, 0) + 1
        choices: Collection[str] = encoders
        if len(held) > 1:
            choices = [e for e in held if e in encoders] or encoders
        if len(choices) == 1:
            (best,) = choices
        else:
            least = 0.0
            tied: list[str] = []
            for e in choices:
                v = encoders[e] + given.get(e, 0)
                if not tied or v < least:
                    least, tied = v, [e]
                elif v == least:
                    tied.append(e)
            # Only a tie needs the hash (the order of the choices does not matter: the least loaded
            # win, and the hash of each picks among them).
            best = tied[0] if len(tied) == 1 else max(tied, key=lambda e: rendezvous(identity, e))
        given[best] = given.get(best, 0) + 1
        out[identity] = best
    return out


@lru_cache(maxsize=4096)
def rendezvous(identity: str, encoder: str) -> int:
    """The tie-break weight of ``encoder`` for ``identity`` (cached: a warm fleet sees the same
    items and encoders again, and a blake2b digest costs more than the lookup)."""
    digest = hashlib.blake2b(f"{identity}\x00{encoder}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")
