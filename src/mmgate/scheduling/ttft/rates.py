"""The TTFT model's terms and rates, and the rates a config gives an endpoint.

A request's time to first token on endpoint ``e`` is modelled as::

    TTFT_e = f_e + p_e * (A_e + P_e) + s_e * (M_e + E_e)

- ``A_e``: prompt tokens queued or running ahead of the request there (what the gateway placed
  and has not seen a first token for, or the scraped waiting queue times the mean request size,
  whichever is larger), ``M_e`` the media part of them;
- ``P_e``: this request's prompt tokens the endpoint's prefix cache does not hold;
- ``E_e``: tokens of this request's media items that neither the prefix cache covers nor the
  encoder cache holds;
- ``p_e`` seconds per prefill token (1 / prefill throughput), ``s_e`` encoder seconds per media
  token, ``f_e`` a fixed part (network, API server, the per-step floor of a short prefill).

The terms are linear, so the three rates can be learned from observed TTFTs by least squares
(:mod:`mmgate.scheduling.ttft.fit`), and a configured rate is a prior for that fit.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import msgspec

from mmgate.scheduling.types import EndpointState

N_TERMS = 3
"""The model's terms: fixed, prefill tokens, encoder tokens."""


@dataclass(slots=True, frozen=True)
class Features:
    """The model's inputs for one request on one endpoint, as seen at decision time."""

    ahead_tokens: int
    ahead_media_tokens: int
    prefill_tokens: int  # this request's, not held by the prefix cache
    encoder_tokens: int  # this request's media tokens to encode there

    def vector(self) -> tuple[float, float, float]:
        """(1, prefill tokens, encoder tokens): what each rate multiplies."""
        return (
            1.0,
            float(self.ahead_tokens + self.prefill_tokens),
            float(self.ahead_media_tokens + self.encoder_tokens),
        )


@dataclass(slots=True, frozen=True)
class Rates:
    """``fixed_s`` seconds plus ``prefill_s_per_token`` and ``encoder_s_per_token`` per token."""

    fixed_s: float
    prefill_s_per_token: float
    encoder_s_per_token: float

    def vector(self) -> tuple[float, float, float]:
        return (self.fixed_s, self.prefill_s_per_token, self.encoder_s_per_token)

    @classmethod
    def of(cls, v: tuple[float, ...] | list[float]) -> Rates:
        return cls(v[0], v[1], v[2])

    def seconds(self, x: tuple[float, float, float]) -> float:
        return self.fixed_s + self.prefill_s_per_token * x[1] + self.encoder_s_per_token * x[2]


class RateSpec(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Configured rates; a field left out is taken from the next, less specific level."""

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

    def values(self) -> tuple[float | None, float | None, float | None]:
        """In the order of :meth:`Rates.vector` (prefill as seconds per token)."""
        p = self.prefillTokensPerSecond
        return (self.fixedSeconds, None if p is None else 1.0 / p, self.encoderSecondsPerToken)


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

    def configured(self, endpoint: EndpointState) -> tuple[Rates, tuple[bool, bool, bool]]:
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
        out = list(self.defaults.vector())
        explicit = [False, False, False]
        for i in range(N_TERMS):
            for spec in specs:
                v = spec.values()[i]
                if v is not None:
                    out[i] = v
                    explicit[i] = True
                    break
        return Rates.of(out), (explicit[0], explicit[1], explicit[2])
