"""How long a step takes: the profile's step formula over what the scheduler put in the batch,
and the run-to-run noise on every duration (one seeded generator, so a run is reproducible)."""

from __future__ import annotations

import random

from mmgate.sim.profiles import StepTiming


class Noise:
    """Multiplicative Gaussian noise (relative sd ``sd``) from one seeded generator, shared by
    the frontend and the steps so the sequence of draws, and hence a run, is reproducible."""

    __slots__ = ("rng", "sd")

    def __init__(self, sd: float, seed: int) -> None:
        self.sd = sd
        self.rng = random.Random(seed)

    def factor(self) -> float:
        return max(0.0, 1.0 + self.rng.gauss(0.0, self.sd))

    def jitter(self, ms: float) -> float:
        return ms * self.factor() if self.sd else ms


def prefill_chunk_ms(t: StepTiming, start: int, n: int) -> float:
    """One chunk of ``n`` new tokens after ``start`` computed ones: per token plus attention
    pairs (see :class:`~mmgate.sim.profiles.StepTiming`)."""
    return n * (t.prefill_ms_per_token + t.prefill_attention_ms * (start + n / 2))


def lm_ms(
    t: StepTiming, prefill_ms: float, any_prefill: bool, n_dec: int, ctx_sum: int, max_ctx: int | None
) -> float:
    """The LM forward of one step: base, prefill chunks, decoding sequences and their contexts
    (``max_ctx`` only when the profile charges the longest context)."""
    ms = t.base_ms + prefill_ms
    if any_prefill:
        ms += t.prefill_fixed_ms
    if n_dec:
        ms += t.decode_ms_per_seq * n_dec + t.decode_ms_per_context_token * ctx_sum
        if max_ctx is not None:
            ms += t.decode_ms_per_max_context_token * max_ctx
    return ms
