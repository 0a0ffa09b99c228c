"""The predicted-TTFT cost model: what a request's time to first token would be on each endpoint.

:mod:`~mmgate.scheduling.ttft.rates` holds the model (five terms, five per-endpoint rates) and
how configured rates are resolved for an endpoint; :mod:`~mmgate.scheduling.ttft.fit` learns the
rates online from observed TTFTs; :mod:`~mmgate.scheduling.ttft.frontend` prices the API server's
front end (media load, processor) and keeps each pod's processor backlog. All are pure: no clock
of their own, no I/O. The plugins that use them are
``predicted-ttft-producer``, ``predicted-ttft-scorer`` and ``predicted-ttft-slo-filter``.
"""

from mmgate.scheduling.ttft.fit import DecayingFit, RateLearner
from mmgate.scheduling.ttft.rates import N_TERMS, Rates, RateSpec, RateTable, Vector

__all__ = ["N_TERMS", "DecayingFit", "RateLearner", "RateSpec", "RateTable", "Rates", "Vector"]
