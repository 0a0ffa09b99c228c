"""The configuration parameters of the plugins that mypyc compiles (:mod:`mmgate.compiled`).

A compiled module cannot define a ``msgspec.Struct``: mypyc builds its classes itself and
msgspec's class keywords (``forbid_unknown_fields``, ``frozen``) and ``msgspec.field`` defaults
would not reach msgspec, so a typo in a config would pass silently. These schemas therefore
live here, uncompiled, and each plugin module imports (and re-exports) its own. Field names are
the YAML keys of ``pluginsConfig`` parameters (llm-d's spelling where llm-d has the plugin);
docs/plugins/README.md describes each.
"""

from __future__ import annotations

from typing import Literal

import msgspec

from mmgate.scheduling.plugins.predicted_ttft_slo_filter import SLO_HEADER
from mmgate.scheduling.ttft import RateSpec
from mmgate.scheduling.ttft.frontend import FrontendRates, default_frontend

TPOT_SLO_HEADER = "x-slo-tpot-ms"  # llm-d's predicted-latency header for a request's TPOT SLO
DEFAULT_BLOCK_SIZE_TOKENS = 16
DEFAULT_LRU_CAPACITY_PER_SERVER = 31250  # llm-d: "500K tokens / 16"


class ApproxPrefixParams(msgspec.Struct, forbid_unknown_fields=True):
    """``approx-prefix-cache-producer``."""

    autoTune: bool = True
    blockSizeTokens: int = DEFAULT_BLOCK_SIZE_TOKENS
    maxPrefixTokensToMatch: int = 131072
    maxPrefixBlocksToMatch: int = 2048
    lruCapacityPerServer: int = DEFAULT_LRU_CAPACITY_PER_SERVER
    blockSize: int = 0  # deprecated llm-d spelling of blockSizeTokens
    minBlockSizeTokens: int = 64  # mmgate: llm-d's hard-coded floor, exposed


class MMEmbeddingsParams(msgspec.Struct, forbid_unknown_fields=True):
    """``mm-embeddings-cache-producer``."""

    cacheSizeInMBPerServer: int = 4096
    encodeProfile: str = "encode"  # mmgate (as llm-d PR #2627 proposes)


class PredictedTTFTParams(msgspec.Struct, forbid_unknown_fields=True):
    """``predicted-ttft-producer`` (docs/plugins/predicted-ttft.md)."""

    prefillTokensPerSecond: float = 10_000.0
    encoderSecondsPerToken: float = 3.0e-5
    fixedSeconds: float = 0.02
    byEndpoint: dict[str, RateSpec] = msgspec.field(default_factory=dict)
    byLabel: dict[str, RateSpec] = msgspec.field(default_factory=dict)
    byRole: dict[str, RateSpec] = msgspec.field(default_factory=dict)
    learn: bool = True
    minSamples: int = 20
    halfLifeSamples: float = 256.0
    priorSamples: float = 2.0
    queueAverageSeconds: float = 30.0
    frontEnd: dict[str, FrontendRates] = msgspec.field(default_factory=default_frontend)
    prefixMatchInfoProducerName: str = ""
    encoderCacheProducerName: str = ""
    inFlightLoadProducerName: str = ""


class PredictedTTFTScorerParams(msgspec.Struct, forbid_unknown_fields=True):
    """``predicted-ttft-scorer``."""

    predictedTTFTProducerName: str = ""
    workWeight: float = 0.0
    futureWeight: float = 0.0


class DecodeSlackScorerParams(msgspec.Struct, forbid_unknown_fields=True):
    """``decode-slack-scorer``."""

    tpotSLOSeconds: float = 0.05
    decodeOutlookProducerName: str = ""


# -- adaptive-encode-decider -----------------------------------------------------------------------


class EncoderRate(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A pod's speeds; a field left out is taken from the next, less specific level."""

    encoderSecondsPerToken: float | None = None
    itemSeconds: float | None = None
    prefillTokensPerSecond: float | None = None
    decodeStepSeconds: float | None = None


class TierSizingParams(msgspec.Struct, forbid_unknown_fields=True):
    """:mod:`mmgate.scheduling.tiers`: the work (seconds) a pod of a role may hold, by role, and
    the requests a decode pod may hold."""

    targetSeconds: float = 1.0
    byRole: dict[str, float] = msgspec.field(default_factory=dict)
    decodeRequests: float = 64.0


class AdaptiveEncodeParams(msgspec.Struct, forbid_unknown_fields=True):
    """``adaptive-encode-decider``."""

    policy: Literal["adaptive", "tier", "local"] = "adaptive"
    encoderSecondsPerToken: float = 3.0e-5
    itemSeconds: float = 0.003
    byEndpoint: dict[str, EncoderRate] = msgspec.field(default_factory=dict)
    byLabel: dict[str, EncoderRate] = msgspec.field(default_factory=dict)
    byRole: dict[str, EncoderRate] = msgspec.field(default_factory=dict)
    transferSecondsPerToken: float = 5.0e-7
    legSeconds: float = 0.005
    sharedWeight: float = 1.0
    split: bool = True
    ttftSLOSeconds: float = 0.0
    sloHeader: str = SLO_HEADER
    tpotSLOSeconds: float = 0.0
    tpotSLOHeader: str = TPOT_SLO_HEADER
    decodeStepSeconds: float = 0.015
    outputTokens: int = 256
    prefillTokensPerSecond: float = 10_000.0
    sizing: TierSizingParams = msgspec.field(default_factory=TierSizingParams)
    encoderCacheProducerName: str = ""
    prefixMatchInfoProducerName: str = ""
    predictedTTFTProducerName: str = ""
