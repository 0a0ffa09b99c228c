"""The data producers publish for filters and scorers, and the keys they publish it under.

Names follow llm-d's attributes (``TokenizedPrompt``, ``PrefixCacheMatchInfo``,
``EncoderCacheMatchInfo``, ``InFlightLoad``). Per-endpoint values are dicts keyed by endpoint
name, computed once per request: a request's blocks are hashed once, whatever the fleet size.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Protocol

import msgspec

from mmgate.scheduling.types import DataKey, EndpointState
from mmgate.tokens import MMItem


class TokenizedPrompt(msgspec.Struct):
    """The request as tokens: ``token_ids`` is the pseudo-token stream (``mmgate.tokens``) that
    media identities are part of, ``media`` each item's span in it (llm-d's
    ``MultiModalFeatures``), ``total_tokens`` what the request costs to prefill (text + media).

    This and the other per-request values below are msgspec structs, not dataclasses: every
    decision makes one of each, and a struct's ``__init__`` runs in C."""

    token_ids: Sequence[int]
    media: list[MMItem]
    total_tokens: int
    media_tokens: int
    cache_salt: str | None = None
    pricing: object | None = None  # the mmgate.tokens Pricing behind these numbers, when used
    stream: bytes | None = None  # ``token_ids`` as little-endian uint32 bytes, when built that way


class PrefixMatch(msgspec.Struct):
    """How many leading blocks of the request each endpoint is believed to hold.

    ``hashes`` are the leading blocks' hashes; a producer that hashes only as far as its lookup
    needs (``approx-prefix-cache-producer``: the blocks after the longest match decide nothing)
    leaves the rest in ``pending``, an iterator that appends each hash it yields to ``hashes``.
    :meth:`all_hashes` finishes the chain (off the decision path: the index update after it).
    """

    block_size: int
    total_blocks: int
    prompt_tokens: int
    hashes: list[int]
    matched: dict[str, int]
    pending: Iterator[int] | None = None

    def all_hashes(self) -> list[int]:
        """Every block's hash, in order (``total_blocks`` of them)."""
        if self.pending is not None:
            for _ in self.pending:
                pass
            self.pending = None
        return self.hashes

    def match_blocks(self, endpoint: str) -> int:
        return self.matched.get(endpoint, 0)

    def ratio(self, endpoint: str) -> float:
        """llm-d's prefix score: matched blocks / total blocks (0 when nothing was hashed)."""
        if self.total_blocks <= 0:
            return 0.0
        return self.matched.get(endpoint, 0) / self.total_blocks

    def matched_tokens(self, endpoint: str) -> int:
        return min(self.matched.get(endpoint, 0) * self.block_size, self.prompt_tokens)


class EncoderCacheMatch(msgspec.Struct):
    """Which of the request's distinct media items each endpoint's encoder cache is believed to
    hold, counted by item and weighted by each item's tokens; ``holders``, aligned with
    ``identities``, the endpoints believed to hold each item."""

    identities: list[str]
    modalities: list[str]
    tokens: list[int]
    matched_items: dict[str, int]
    matched_tokens: dict[str, int]
    matched_indices: dict[str, list[int]]
    holders: list[frozenset[str]]

    def hits_by_modality(self, endpoint: str) -> dict[str, int]:
        """Items ``endpoint`` holds, per modality (for encoder-cache hit metrics)."""
        out: dict[str, int] = {}
        for i in self.matched_indices.get(endpoint, ()):
            m = self.modalities[i]
            out[m] = out.get(m, 0) + 1
        return out

    @property
    def total_items(self) -> int:
        return len(self.identities)

    @property
    def total_tokens(self) -> int:
        return sum(self.tokens)


class InflightEstimate(msgspec.Struct):
    """What this request will add to an endpoint's in-flight counters before prefix discounts."""

    input_tokens: int
    output_tokens: int


Candidate = tuple[str, float, float, float, float, float, int, int, int, int, int]
"""One endpoint's row in :class:`PredictedTTFT`: its name; the future cost's parts (the marginal
wait there, the displaced reuse, the delay to those queued behind); this request's own work
there; the processor seconds its caches are believed to save it; and the model's terms but the
constant one (prefill tokens, encoder tokens, believed encoder hits, believed prefix hits,
tokens ahead)."""


class PredictedTTFT(msgspec.Struct):
    """Each endpoint's predicted time to first token for this request, in seconds
    (``predicted-ttft-producer``), and the model terms behind it, kept so the observed TTFT can
    be fitted against them. ``stale`` names the endpoints whose metrics were missing or stale:
    their predictions were made pessimistic. ``work`` is the part of each prediction that is
    this request's own encode and prefill there: the time it will hold that pod's GPU, which
    every request queued behind it waits too. ``future`` is what placing it there costs later
    requests: the queue it commits the content's later requests to and the cached work its
    cache room displaces (docs/plugins/predicted-ttft.md). ``most_reused`` is the most tokens
    any endpoint was believed to hold for it (prefix plus encoder hits: each endpoint's are its
    terms' ``[3] + [4]``).

    What is only read for the endpoint chosen (its terms, work and processor seconds saved) is
    kept as the producer made it, one :data:`Candidate` per endpoint, and read through
    :attr:`terms`, :attr:`work`, :attr:`frontend_saved` or, for one endpoint, :meth:`candidate`:
    no dict of them is built on the decision's path."""

    seconds: dict[str, float]
    candidates: list[Candidate]
    stale: list[str]
    future: dict[str, float]
    frontend: tuple[float, float] = (0.0, 0.0)  # the request's own API-server seconds (load, processor)
    most_reused: int = 0

    def candidate(self, endpoint: str) -> Candidate | None:
        """The row of one endpoint (``None`` if it was not predicted)."""
        for c in self.candidates:
            if c[0] == endpoint:
                return c
        return None

    @property
    def terms(self) -> dict[str, tuple[float, ...]]:
        """Per endpoint, the model's terms (``mmgate.scheduling.ttft.rates``), in their order."""
        return {c[0]: (1.0, c[6], c[7], c[8], c[9], c[10]) for c in self.candidates}

    @property
    def work(self) -> dict[str, float]:
        """Per endpoint, this request's own encode and prefill seconds there."""
        return {c[0]: c[4] for c in self.candidates}

    @property
    def frontend_saved(self) -> dict[str, float]:
        """Per endpoint whose caches are believed to save it any, the processor seconds saved."""
        return {c[0]: c[5] for c in self.candidates if c[5]}


TOKENIZED_PROMPT: DataKey[TokenizedPrompt] = DataKey("TokenizedPrompt")
PREFIX_MATCH: DataKey[PrefixMatch] = DataKey("PrefixCacheMatchInfo")
ENCODER_CACHE_MATCH: DataKey[EncoderCacheMatch] = DataKey("EncoderCacheMatchInfo")
INFLIGHT_LOAD: DataKey[InflightEstimate] = DataKey("InFlightLoad")
PREDICTED_TTFT: DataKey[PredictedTTFT] = DataKey("PredictedTTFT")


class EncodeChoice(msgspec.Struct):
    """Where a request's media are encoded (``adaptive-encode-decider``): ``outcome`` ``tier``,
    ``local`` (the serving pod) or ``split``, why (``reason``), the encode pod of each item sent to
    the tier (``plan``, by identity; ``local`` for an item the serving pod encodes), the costs
    compared (seconds, ``tier_cost`` ``inf`` when there was no tier to ask; a decision by the
    TTFT SLO, reason ``slo-*``: the predicted TTFTs with every item encoded locally and with
    every cold item on the tier) and the encoder
    seconds the choice puts on each pod (``seconds``, by endpoint)."""

    outcome: str
    reason: str
    plan: dict[str, str]
    local_cost: float
    tier_cost: float
    seconds: dict[str, float] = {}


ENCODER_PLAN: DataKey[dict[str, str]] = DataKey("EncoderPlan")
"""Per distinct media item (identity), the encode pod planned for it (``encoder-header-handler``):
the encoder-cache producer records each item on that pod alone."""
ENCODE_CHOICE: DataKey[EncodeChoice] = DataKey("EncodeChoice")
ENCODE_TIER: DataKey[list[EndpointState]] = DataKey("EncodeTier")
"""The request's candidates that can encode for another pod (``adaptive-encode-decider``)."""


class DecodeOutlook(Protocol):
    """What the requests decoding on each pod are predicted to see (``adaptive-encode-decider``
    follows them): asked per candidate by ``decode-slack-scorer``, so a fleet whose profiles do
    not score it pays nothing."""

    def decode_tpot(self, endpoint: EndpointState, now: float) -> float | None:
        """The highest TPOT (seconds) predicted for a request decoding on ``endpoint``; ``None``
        when none decodes there."""
        ...


DECODE_OUTLOOK: DataKey[DecodeOutlook] = DataKey("DecodeOutlook")

# The producer created when a consumer needs a key nobody produces (llm-d RegisterAsDefaultProducer).
DEFAULT_PRODUCERS: dict[str, str] = {
    TOKENIZED_PROMPT.name: "token-producer",
    PREFIX_MATCH.name: "approx-prefix-cache-producer",
    ENCODER_CACHE_MATCH.name: "mm-embeddings-cache-producer",
    INFLIGHT_LOAD.name: "inflight-load-producer",
    PREDICTED_TTFT.name: "predicted-ttft-producer",
}
