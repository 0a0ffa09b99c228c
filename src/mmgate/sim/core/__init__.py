"""The simulated vLLM engine: a pure, step-driven model of one pod (no clock, no I/O).

:class:`Engine` (``engine``) is the entry point; ``scheduler`` decides each step's batch, ``prefix``
and ``kv`` hold the prefix cache and its block pool, ``encoder`` and ``caches`` the encoder and
processor caches, ``frontend`` the API server's preprocessing, ``timing`` a step's duration,
``decode`` the decoding set, ``types`` the values it takes and gives. The KV events and the stats
snapshot it reports are the model-server contract (:mod:`mmgate.modelserver.events`, ``.stats``).
"""

from mmgate.sim.core.engine import Engine
from mmgate.sim.core.types import (
    EngineConfig,
    FinishedRequest,
    MediaPayload,
    MediaSpan,
    SimRequest,
    StepOutput,
)

__all__ = [
    "Engine",
    "EngineConfig",
    "FinishedRequest",
    "MediaPayload",
    "MediaSpan",
    "SimRequest",
    "StepOutput",
]
