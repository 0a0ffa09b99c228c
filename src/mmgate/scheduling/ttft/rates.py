"""The TTFT model's terms and rates, and the rates a config gives an endpoint.

A request's time to first token on endpoint ``e`` is modelled as::

    TTFT_e = f_e + p_e * P_e + s_e * (M_e + E_e) + h_e * H_e + c_e * C_e + q_e * A_e

- ``A_e``: prompt tokens queued or running ahead of the request there (what the gateway placed
  and has not seen a first token for, or the scraped waiting queue times the mean request size,
  whichever is larger), ``M_e`` the media part of them;
- ``P_e``: this request's prompt tokens the endpoint's prefix cache is not believed to hold;
- ``E_e``: tokens of this request's media items that neither the prefix cache covers nor the
  encoder cache is believed to hold;
- ``H_e`` / ``C_e``: the media tokens believed held by the encoder cache, and the prompt tokens
  believed held by the prefix cache — what the gateway *believes* was saved;
- ``p_e`` seconds per prefill token (1 / prefill throughput), ``s_e`` encoder seconds per media
  token, ``f_e`` a fixed part (network, API server, the per-step floor of a short prefill);
- ``q_e``: seconds per token queued ahead, ``p_e`` to begin with; learned apart from ``p_e``
  because the engine batches: a prefill chunk shares its step with the chunks of requests ahead
  of it, so a token ahead delays this request by less than a token of its own;
- ``h_e``, ``c_e``: what a believed hit still costs per token, 0 if the gateway's indexes are
  right. The gateway never sees the caches, only where it sent content; where a pod evicts sooner
  than the index assumes, its believed hits are partly misses, and these two rates, learned from
  observed TTFTs, price that in.

The terms are linear, so the rates can be learned from observed TTFTs by least squares
(:mod:`mmgate.scheduling.ttft.fit`), and configured rates are a prior for that fit.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import msgspec

from mmgate.scheduling.types import EndpointState

N_TERMS = 6
"""The model's terms: fixed, prefill tokens, encoder tokens, believed encoder hits, believed prefix
hits, tokens ahead."""

Vector = tuple[float, ...]
"""One value per term, in the order above (the terms of a request, or the rates)."""
Explicit = tuple[bool, ...]


@dataclass(slots=True, frozen=True)
class Rates:
    """Seconds: ``fixed_s``, plus per token of each term (see the module docstring)."""

    fixed_s: float
    prefill_s_per_token: float
    encoder_s_per_token: float
    encoder_hit_s_per_token: float = 0.0
    prefix_hit_s_per_token: float = 0.0
    queue_s_per_token: float | None = None  # None: the prefill rate
    queue: float = field(init=False, repr=False, compare=False)
    """``queue_s_per_token`` resolved."""
    vector: Vector = field(init=False, repr=False, compare=False)
    """The six rates in the terms' order, made once: a decision unpacks it for each candidate."""

    def __post_init__(self) -> None:
        if self.queue_s_per_token is None:
            object.__setattr__(self, "queue_s_per_token", self.prefill_s_per_token)
        q = self.prefill_s_per_token if self.queue_s_per_token is None else self.queue_s_per_token
        object.__setattr__(self, "queue", q)
        vector = (
            self.fixed_s,
            self.prefill_s_per_token,
            self.encoder_s_per_token,
            self.encoder_hit_s_per_token,
            self.prefix_hit_s_per_token,
            q,
        )
        object.__setattr__(self, "vector", vector)

    @classmethod
    def of(cls, v: Sequence[float]) -> Rates:
        return cls(v[0], v[1], v[2], v[3], v[4], v[5])

    def seconds(self, x: Sequence[float]) -> float:
        return (
            self.fixed_s * x[0]
            + self.prefill_s_per_token * x[1]
            + self.encoder_s_per_token * x[2]
            + self.encoder_hit_s_per_token * x[3]
            + self.prefix_hit_s_per_token * x[4]
            + self.queue * x[5]
        )


class RateSpec(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Configured rates; a field left out is taken from the next, less specific level. (What a
    believed hit costs is not configured: it starts at 0 and is learned.)"""

    prefillTokensPerSecond: float | None = None
    encoderSecondsPerToken: float | None = None
    fixedSeconds: float | None = None

    def check(self, where: str) -> None:
        if self.prefillTokensPerSecond is not None and not self.prefillTokensPerSecond > 0:
            raise ValueError(f"{where}.prefillTokensPerSecond must be > 0, got {self.prefillTokensPerSecond}")
        if self.encoderSecondsPerToken is not None and not self.encoderSecondsPerToken >= 0:
            raise ValueError(
                f"{where}.encoderSecondsPerToken must be >= 0, got {self.encoderSecondsPerToken}"
            )
        if self.fixedSeconds is not None and not self.fixedSeconds >= 0:
            raise ValueError(f"{where}.fixedSeconds must be >= 0, got {self.fixedSeconds}")

    def values(self) -> tuple[float | None, ...]:
        """In the order of :attr:`Rates.vector` (prefill as seconds per token)."""
        p = None if self.prefillTokensPerSecond is None else 1.0 / self.prefillTokensPerSecond
        return (self.fixedSeconds, p, self.encoderSecondsPerToken, None, None, p)


class RateTable:
    """The rates a config gives each endpoint: by endpoint name, else by label (``key=value``),
    else by role, else the defaults. Each rate is resolved on its own, so a role may set the
    encoder rate and leave prefill to the defaults."""

    def __init__(
        self,
        defaults: Rates,
        *,
        by_endpoint: Mapping[str, RateSpec] | None = None,
        by_label: Mapping[str, RateSpec] | None = None,
        by_role: Mapping[str, RateSpec] | None = None,
    ) -> None:
        self.defaults = defaults
        self.by_endpoint = dict(by_endpoint or {})
        self.by_role = dict(by_role or {})
        self.by_label: list[tuple[str, str, RateSpec]] = []
        for selector, spec in (by_label or {}).items():
            key, sep, value = selector.partition("=")
            if not sep or not key:
                raise ValueError(f"byLabel key {selector!r} must be 'label=value'")
            self.by_label.append((key, value, spec))

    def configured(self, endpoint: EndpointState) -> tuple[Rates, Explicit]:
        """The endpoint's rates and, per rate, whether the config named it for this endpoint
        (by name, label or role) rather than leaving it to the defaults."""
        specs: list[RateSpec] = []
        own = self.by_endpoint.get(endpoint.name)
        if own is not None:
            specs.append(own)
        labels = endpoint.labels
        for key, value, spec in self.by_label:
            if labels.get(key) == value:
                specs.append(spec)
        role = endpoint.effective_role
        if role is not None and role in self.by_role:
            specs.append(self.by_role[role])
        out = list(self.defaults.vector)
        explicit = [False] * N_TERMS
        for i in range(N_TERMS):
            for spec in specs:
                v = spec.values()[i]
                if v is not None:
                    out[i] = v
                    explicit[i] = True
                    break
        return Rates.of(out), tuple(explicit)
