"""Learning the TTFT model's rates online, per endpoint, from the TTFTs the gateway observes.

Each endpoint has an exponentially decaying least-squares fit of observed TTFT on the model's
terms (:mod:`~mmgate.scheduling.ttft.rates`), so a pod whose speed changes (another
GPU, a noisy neighbour, a new engine version) is relearned within a few half-lives. Three things
keep it robust:

- a **prior**: the fit is a ridge regression pulled towards prior rates with the weight of
  ``prior_samples`` observations, so terms the traffic does not exercise (no media yet) stay
  where the prior puts them instead of wandering;
- **relative errors**: each observation weighs ``1 / predicted^2`` (the prediction made with
  the rates of that moment), so the fit minimises relative error: TTFT noise grows with TTFT (a
  loaded pod's queue varies more), and a 10 ms error on a 50 ms request matters as much to a
  decision as 1 s on a 5 s one. Weighing by the *observed* TTFT instead would favour the
  observations that came out short and bias every rate low (a believed cache hit that was a
  miss would hardly count);
- **Huber weights**: once an endpoint has ``min_samples`` observations, one whose relative
  residual is more than ``HUBER_K`` times the mean absolute one counts proportionally less (a
  preempted request, a GC pause, a network hiccup do not drag the rates);
- **non-negative rates**: a term whose unconstrained estimate is negative is fixed at zero and
  the rest refitted (an active-set step), so collinear terms cannot cancel each other out.

An endpoint's prior is what the config names for it (by endpoint, label or role), else the
pooled fit over every endpoint's observations (itself pulled towards the defaults), so a new pod
starts from what the fleet has shown, not from a guess. Until an endpoint has ``min_samples``
observations its prior is used as is: a handful of samples never overrides it.

Each observation updates the endpoint's sufficient statistics and re-solves them (Cholesky, on
the upper triangle kept), in the first-token hook, off the request path: a decision only reads
the rates last solved. (Solving lazily, when a decision next read the rates, moved that solve onto
the decision: measured +60 µs on a three-image decision at 8 endpoints.) An observation's
relative error is taken against the rates last solved.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

from mmgate.scheduling.ttft.rates import N_TERMS, Explicit, Rates, Vector
from mmgate.scheduling.types import EndpointState

HUBER_K = 3.0
POOLED_EVERY = 16  # once trusted, the pooled fit (a prior only) is re-solved every this many observations
FLOOR_S = 1e-3  # relative errors are taken against a prediction of at least this


class DecayingFit:
    """Exponentially weighted sufficient statistics of ``y ~ theta . x`` and their ridge solve."""

    __slots__ = ("abs_residual", "count", "decay", "samples", "size", "xx", "xy")

    def __init__(self, decay: float, size: int = N_TERMS) -> None:
        self.decay = decay
        self.size = size
        self.count = 0  # observations ever (the floor on samples compares against it)
        self.samples = 0.0  # decayed count of observations
        self.abs_residual = 0.0  # decayed sum of |relative residual| (mean: / samples)
        self.xx = [[0.0] * size for _ in range(size)]
        self.xy = [0.0] * size

    @property
    def scale(self) -> float:
        """Mean absolute relative residual (0 before any observation)."""
        return self.abs_residual / self.samples if self.samples > 0 else 0.0

    def add(self, x: Vector, y: float, predicted: float, trusted: bool) -> None:
        """One observation ``y`` of terms ``x`` that the current rates predicted as ``predicted``;
        ``trusted``: the fit has enough samples for its residual scale to mean something."""
        ref = max(predicted, FLOOR_S)
        residual = (y - predicted) / ref
        weight = self.weight_of(residual, trusted) / (ref * ref)
        d = self.decay
        self.count += 1
        self.samples = self.samples * d + 1.0
        scale = self.scale
        clipped = abs(residual) if scale <= 0 else min(abs(residual), HUBER_K * scale)
        self.abs_residual = self.abs_residual * d + clipped
        xx, xy = self.xx, self.xy
        size = self.size
        for i in range(size):  # xx is symmetric: its upper triangle is kept
            wxi = weight * x[i]
            row = xx[i]
            for j in range(i, size):
                row[j] = row[j] * d + wxi * x[j]
            xy[i] = xy[i] * d + wxi * y

    def weight_of(self, residual: float, trusted: bool) -> float:
        """The Huber weight of an observation with this residual."""
        scale = self.scale
        if not trusted or scale <= 0:
            return 1.0
        limit = HUBER_K * scale
        r = abs(residual)
        return 1.0 if r <= limit else limit / r

    def solve(self, prior: Vector, prior_samples: float) -> Vector:
        """The ridge solution pulled towards ``prior``, every rate non-negative."""
        n = self.samples
        xx, xy = self.xx, self.xy
        # Pull each rate with the weight of prior_samples observations of a typical size of its
        # term (the decayed mean of x_j^2), so the pull does not depend on the term's units.
        size = self.size
        ridge = [prior_samples * (xx[j][j] / n if n > 0 else 1.0) + 1e-12 for j in range(size)]
        free = list(range(size))
        theta = [0.0] * size
        for _ in range(size):
            # the lower triangle (what the factorisation reads) from the kept upper one
            a = [[xx[j][i] for j in free[:k]] + [xx[i][i] + ridge[i]] for k, i in enumerate(free)]
            b = [xy[i] + ridge[i] * prior[i] for i in free]
            solved = _cholesky_solve(a, b)
            if solved is None:
                return prior
            theta = [0.0] * size
            for k, i in enumerate(free):
                theta[i] = solved[k]
            negative = [i for i in free if theta[i] < 0]
            if not negative:
                break
            free = [i for i in free if i not in negative]
            if not free:
                break
        return tuple(max(0.0, v) for v in theta)


def _cholesky_solve(a: list[list[float]], b: list[float]) -> list[float] | None:
    """Solve ``a x = b`` for a small symmetric positive definite ``a`` (the ridge makes it so)
    by Cholesky factorisation: half the work of elimination, and no pivoting to do. Only the
    lower triangle is read (``a[i][j]`` for ``j <= i``). ``None`` when ``a`` is not numerically
    positive definite."""
    n = len(b)
    low = [[0.0] * n for _ in range(n)]
    for i in range(n):
        ai, li = a[i], low[i]
        for j in range(i + 1):
            lj = low[j]
            v = ai[j]
            for k in range(j):
                v -= li[k] * lj[k]
            if i == j:
                if not v > 0:
                    return None
                li[i] = math.sqrt(v)
            else:
                li[j] = v / lj[j]
    y = [0.0] * n
    for i in range(n):
        li = low[i]
        v = b[i]
        for k in range(i):
            v -= li[k] * y[k]
        y[i] = v / li[i]
    x = [0.0] * n
    for i in range(n - 1, -1, -1):
        v = y[i]
        for k in range(i + 1, n):
            v -= low[k][i] * x[k]
        x[i] = v / low[i][i]
    return x if all(math.isfinite(v) for v in x) else None


class _Endpoint:
    __slots__ = ("configured", "explicit", "fit", "rates")

    def __init__(self, configured: Rates, explicit: Explicit, decay: float) -> None:
        self.configured = configured
        self.explicit = explicit
        self.fit = DecayingFit(decay, N_TERMS - 1)  # the queue rate is tied to the prefill rate
        self.rates: Rates | None = None  # the learned rates, once trusted


class RateLearner:
    """Per-endpoint rates: configured, learned from observations, or both.

    ``configured(endpoint)`` gives an endpoint's configured rates and which of them the config
    named for it (:meth:`RateTable.configured`). With ``learn`` off the configured rates are
    used as they are. ``half_life_samples``: an observation's weight halves after that many
    newer observations of the same endpoint.
    """

    def __init__(
        self,
        defaults: Rates,
        configured: Callable[[EndpointState], tuple[Rates, Explicit]],
        *,
        learn: bool = True,
        min_samples: int = 20,
        half_life_samples: float = 256.0,
        prior_samples: float = 2.0,
    ) -> None:
        if min_samples < 1:
            raise ValueError(f"minSamples must be >= 1, got {min_samples}")
        if half_life_samples <= 0:
            raise ValueError(f"halfLifeSamples must be > 0, got {half_life_samples}")
        decay = 0.5 ** (1.0 / half_life_samples)
        if 1.0 / (1.0 - decay) < min_samples:
            raise ValueError(
                f"halfLifeSamples {half_life_samples:g} forgets too fast for minSamples {min_samples}: "
                f"at most {1.0 / (1.0 - decay):.0f} samples ever count"
            )
        if prior_samples < 0:
            raise ValueError(f"priorSamples must be >= 0, got {prior_samples}")
        self.defaults = defaults
        self.learn = learn
        self.min_samples = min_samples
        self.prior_samples = prior_samples
        self._decay = decay
        self._configured = configured
        self._endpoints: dict[str, _Endpoint] = {}
        self._pooled = DecayingFit(decay)
        self._pooled_rates: Rates | None = None
        self._current: dict[str, Rates] = {}  # what rates() returns, per endpoint, until it changes
        self._solves = 0

    def _state(self, endpoint: EndpointState) -> _Endpoint:
        state = self._endpoints.get(endpoint.name)
        if state is None:
            rates, explicit = self._configured(endpoint)
            state = self._endpoints[endpoint.name] = _Endpoint(rates, explicit, self._decay)
        return state

    def _prior(self, state: _Endpoint) -> Rates:
        """What the config names for the endpoint, the rest from the pooled fit (or defaults)."""
        if not self.learn or self._pooled_rates is None or all(state.explicit):
            return state.configured
        pooled = self._pooled_rates.vector
        own = state.configured.vector
        return Rates.of([o if e else p for o, p, e in zip(own, pooled, state.explicit, strict=True)])

    def rates(self, endpoint: EndpointState) -> Rates:
        """The rates to predict with for ``endpoint`` now."""
        rates = self._current.get(endpoint.name)
        if rates is None:
            state = self._state(endpoint)
            rates = self._current[endpoint.name] = (
                state.rates if state.rates is not None else self._prior(state)
            )
        return rates

    @property
    def current(self) -> Mapping[str, Rates]:
        """The rates :meth:`rates` gives each endpoint it was asked about, as they stand: an entry
        is replaced when the endpoint's fit solves or, for an endpoint still on its prior, when
        the pooled fit solves, and dropped when it leaves the fleet, always in this one mapping,
        so a caller may keep it. A decision reads its candidates' rates here with one lookup
        each, and asks :meth:`rates` only for an endpoint missing from it."""
        return self._current

    def _solve(self, state: _Endpoint) -> Rates:
        theta = state.fit.solve(self._prior(state).vector[:-1], self.prior_samples)
        rates = state.rates = Rates.of((*theta, self.queue_share * theta[1]))
        self._solves += 1
        return rates

    @property
    def queue_share(self) -> float:
        """``kappa = q / p``: what a token queued ahead costs relative to one of the request's
        own, from the pooled fit (the defaults' until it is trusted). It is the engine's batching
        (a queued chunk shares the step with this request's), the same on every pod of one
        engine configuration; each pod's own fit learns only its speed ``p_e`` and prices its
        queue at ``kappa * p_e``. Left free per pod, ``q_e`` is barely identified (at low load
        most requests have nothing ahead): on eight identical H200 pods the free fits spread it
        13-fold, and the pod with the smallest looked idle whatever its queue."""
        rates = self._pooled_rates or self.defaults
        p = rates.prefill_s_per_token
        return rates.queue / p if p > 0 else 1.0

    @property
    def solves(self) -> int:
        """Per-endpoint solves so far (the pooled fit's are not counted)."""
        return self._solves

    def learned(self, name: str) -> bool:
        """Whether ``name``'s own observations (at least ``min_samples``) set its rates."""
        state = self._endpoints.get(name)
        return state is not None and state.rates is not None

    def samples(self, name: str) -> float:
        """The decayed number of observations behind ``name``'s fit."""
        state = self._endpoints.get(name)
        return 0.0 if state is None else state.fit.samples

    def observe(self, endpoint: EndpointState, x: Vector, ttft_s: float) -> None:
        """One observed TTFT on ``endpoint`` for a request whose terms were ``x``."""
        if not self.learn or not (ttft_s >= 0 and math.isfinite(ttft_s)):
            return
        state = self._state(endpoint)
        fit = state.fit
        last = state.rates if state.rates is not None else self._prior(state)
        tied = (x[0], x[1] + self.queue_share * x[5], x[2], x[3], x[4])
        fit.add(tied, ttft_s, last.seconds(x), fit.count >= self.min_samples)
        pooled = self._pooled
        trusted = self._pooled_rates is not None
        pooled.add(x, ttft_s, (self._pooled_rates or self.defaults).seconds(x), trusted)
        if pooled.count >= self.min_samples and (not trusted or pooled.count % POOLED_EVERY == 0):
            self._pooled_rates = Rates.of(pooled.solve(self.defaults.vector, self.prior_samples))
            # Endpoints still on their prior see the change now, in the first-token hook, rather
            # than each on the next decision that reads its rates (measured: ~11k instructions per
            # endpoint re-priced, all of a fleet's on one decision every POOLED_EVERY observations).
            current, states = self._current, self._endpoints
            for name in current:  # every endpoint in current has a state (rates() made it)
                other = states[name]
                if other.rates is None:
                    current[name] = self._prior(other)
        if fit.count >= self.min_samples:
            self._current[endpoint.name] = self._solve(state)

    def forget(self, name: str) -> None:
        """``name`` left the fleet: its fit goes (the pooled fit keeps what it taught)."""
        self._endpoints.pop(name, None)
        self._current.pop(name, None)
