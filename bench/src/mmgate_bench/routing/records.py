"""What a benchmark run measures, shared by the HTTP load generator and the discrete-event mode.

Both modes produce the same records, so one report path serves both and their outputs can be
compared field by field.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field


@dataclass(slots=True)
class RequestRecord:
    """One request as the client saw it. Times are seconds; ``sent_s`` is relative to rung start.

    ``error`` is ``None`` for a success, otherwise the failure type (``http_503``, ``timeout``,
    ``connect``, ``disconnect``, ``stream_error``, ``empty``). ``predicted_ttft_s`` is what the
    scheduler predicted for it (configs with ``predicted-ttft-producer``; DES mode); ``encode``
    where its media were encoded (``tier``, ``local``, ``split``: configs with
    ``adaptive-encode-decider``; DES mode) and ``encode_reason`` why.
    """

    item_id: str
    sent_s: float
    ttft_s: float | None = None
    e2e_s: float | None = None
    output_tokens: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    itl_s: list[float] = field(default_factory=list)
    error: str | None = None
    endpoint: str | None = None
    predicted_ttft_s: float | None = None
    encode: str | None = None  # where its media were encoded (adaptive-encode-decider: tier, local, split)
    encode_reason: str | None = None  # and why

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def tpot_s(self) -> float | None:
        """Time per output token after the first (vLLM's definition)."""
        if self.ttft_s is None or self.e2e_s is None or self.output_tokens < 2:
            return None
        return (self.e2e_s - self.ttft_s) / (self.output_tokens - 1)


@dataclass(slots=True)
class CacheCounters:
    """Fleet-wide cache counters (prefix in tokens, encoder in items), summed over pods."""

    prefix_queries: float = 0.0
    prefix_hits: float = 0.0
    encoder_queries: float = 0.0
    encoder_hits: float = 0.0

    def __add__(self, other: CacheCounters) -> CacheCounters:
        return CacheCounters(
            self.prefix_queries + other.prefix_queries,
            self.prefix_hits + other.prefix_hits,
            self.encoder_queries + other.encoder_queries,
            self.encoder_hits + other.encoder_hits,
        )

    def __sub__(self, other: CacheCounters) -> CacheCounters:
        return CacheCounters(
            self.prefix_queries - other.prefix_queries,
            self.prefix_hits - other.prefix_hits,
            self.encoder_queries - other.encoder_queries,
            self.encoder_hits - other.encoder_hits,
        )

    @property
    def prefix_hit_ratio(self) -> float | None:
        return self.prefix_hits / self.prefix_queries if self.prefix_queries > 0 else None

    @property
    def encoder_hit_ratio(self) -> float | None:
        return self.encoder_hits / self.encoder_queries if self.encoder_queries > 0 else None


@dataclass(slots=True)
class RungResult:
    """Every request of one rung of the ladder, for one system, plus the cache counter deltas.

    ``span_s`` runs from the rung's first send to its last completion (drain included), the
    denominator of throughput, as in ``vllm bench serve``. ``itl_weighted``, when set, replaces the
    per-record ITL lists with (gap, count) pairs (the discrete-event mode's compact form).
    """

    system: str
    rate: float
    duration_s: float
    span_s: float
    records: list[RequestRecord]
    cache: CacheCounters = field(default_factory=CacheCounters)
    mode: str = "http"
    itl_weighted: list[tuple[float, int]] | None = None
    fallbacks: int | None = None  # encode or prefill stages that fell back (None: not counted)
    # HTTP: the gateway's |predicted - observed| TTFT histogram counted during the rung, per endpoint
    # (cumulative counts by bound, simulated seconds); None when the router keeps none
    prediction_errors: dict[str, dict[float, float]] | None = None
    # HTTP: per outcome, the encode decisions the gateway counted during the rung (adaptive-encode-
    # decider; the records carry no outcome over HTTP); None: not counted
    encode_outcomes: dict[str, int] | None = None
    encode_reasons: dict[str, int] | None = None  # the same, per reason


@dataclass(frozen=True, slots=True)
class Ladder:
    """An open-loop rate ladder: an optional warm-up rung, then one rung per rate."""

    rates: tuple[float, ...]
    duration_s: float
    warmup_s: float = 0.0
    warmup_rate: float | None = None
    arrival: str = "constant"  # "constant" | "poisson"
    seed: int = 0
    max_concurrency: int | None = None
    drain_timeout_s: float = 120.0
    request_timeout_s: float = 600.0

    def rungs(self) -> list[tuple[int, float, float, bool]]:
        """(index, rate, duration, is_warmup) in run order; index -1 is the warm-up."""
        out = []
        if self.warmup_s > 0:
            out.append((-1, self.warmup_rate or self.rates[0], self.warmup_s, True))
        out += [(i, r, self.duration_s, False) for i, r in enumerate(self.rates)]
        return out


def arrival_times(rate: float, duration_s: float, kind: str, seed: int) -> list[float]:
    """Send offsets within a rung: evenly spaced (``constant``) or a seeded Poisson process."""
    if rate <= 0 or duration_s <= 0:
        return []
    if kind == "constant":
        n = math.floor(rate * duration_s + 1e-9)
        return [i / rate for i in range(n)]
    if kind == "poisson":
        rng = random.Random(seed)
        out, t = [], rng.expovariate(rate)
        while t < duration_s:
            out.append(t)
            t += rng.expovariate(rate)
        return out
    raise ValueError(f"unknown arrival process {kind!r} (constant | poisson)")


def parse_rates(text: str) -> tuple[float, ...]:
    """``5,10,15`` or ``5:40:5`` (start:stop:step, inclusive) into a tuple of rates."""
    text = text.strip()
    if ":" in text:
        start, stop, step = (float(x) for x in text.split(":"))
        if step <= 0:
            raise ValueError("rate step must be positive")
        n = math.floor((stop - start) / step + 1e-9) + 1
        return tuple(round(start + i * step, 9) for i in range(n))
    rates = tuple(float(x) for x in text.split(",") if x.strip())
    if not rates or any(r <= 0 for r in rates):
        raise ValueError(f"rates must be positive numbers, got {text!r}")
    return rates
