"""Built-in plugins, one module per llm-d type name; :data:`BUILTIN_PLUGINS` lists their classes.

Each class carries its llm-d ``type_name``; :func:`mmgate.scheduling.registry.builtin_registry`
registers this tuple. A new plugin is a module here and one line in the tuple.
"""

from typing import Any

from mmgate.scheduling.contracts import Plugin
from mmgate.scheduling.plugins.active_request_scorer import ActiveRequestScorer
from mmgate.scheduling.plugins.adaptive_encode_decider import AdaptiveEncodeDecider
from mmgate.scheduling.plugins.always_disagg_multimodal_decider import AlwaysDisaggMultimodalDecider
from mmgate.scheduling.plugins.always_disagg_pd_decider import AlwaysDisaggPDDecider
from mmgate.scheduling.plugins.approx_prefix_cache_producer import ApproxPrefixCacheProducer
from mmgate.scheduling.plugins.decode_filter import DecodeFilter
from mmgate.scheduling.plugins.decode_slack_scorer import DecodeSlackScorer
from mmgate.scheduling.plugins.disagg_profile_handler import DisaggProfileHandler
from mmgate.scheduling.plugins.encode_filter import EncodeFilter
from mmgate.scheduling.plugins.encoder_header_handler import EncoderHeaderHandler
from mmgate.scheduling.plugins.inflight_load_producer import InflightLoadProducer
from mmgate.scheduling.plugins.kv_cache_utilization_scorer import KVCacheUtilizationScorer
from mmgate.scheduling.plugins.load_aware_scorer import LoadAwareScorer
from mmgate.scheduling.plugins.lora_affinity_scorer import LoraAffinityScorer
from mmgate.scheduling.plugins.max_score_picker import MaxScorePicker
from mmgate.scheduling.plugins.mm_embeddings_cache_affinity_filter import MMEmbeddingsCacheAffinityFilter
from mmgate.scheduling.plugins.mm_embeddings_cache_producer import MMEmbeddingsCacheProducer
from mmgate.scheduling.plugins.mm_embeddings_cache_scorer import MMEmbeddingsCacheScorer
from mmgate.scheduling.plugins.no_hit_lru_scorer import NoHitLRUScorer
from mmgate.scheduling.plugins.precise_prefix_cache_producer import PrecisePrefixCacheProducer
from mmgate.scheduling.plugins.predicted_ttft_producer import PredictedTTFTProducer
from mmgate.scheduling.plugins.predicted_ttft_scorer import PredictedTTFTScorer
from mmgate.scheduling.plugins.predicted_ttft_slo_filter import PredictedTTFTSLOFilter
from mmgate.scheduling.plugins.prefill_filter import PrefillFilter
from mmgate.scheduling.plugins.prefill_header_handler import PrefillHeaderHandler
from mmgate.scheduling.plugins.prefix_based_pd_decider import PrefixBasedPDDecider
from mmgate.scheduling.plugins.prefix_cache_affinity_filter import PrefixCacheAffinityFilter
from mmgate.scheduling.plugins.prefix_cache_scorer import PrefixCacheScorer
from mmgate.scheduling.plugins.queue_scorer import QueueScorer
from mmgate.scheduling.plugins.random_picker import RandomPicker
from mmgate.scheduling.plugins.round_robin_picker import RoundRobinPicker
from mmgate.scheduling.plugins.single_profile_handler import SingleProfileHandler
from mmgate.scheduling.plugins.token_load_scorer import TokenLoadScorer
from mmgate.scheduling.plugins.token_producer import TokenProducer
from mmgate.scheduling.plugins.weighted_random_picker import WeightedRandomPicker

# Grouped by kind, in the order a request meets them.
BUILTIN_PLUGINS: tuple[type[Plugin[Any]], ...] = (
    # producers
    TokenProducer,
    ApproxPrefixCacheProducer,
    PrecisePrefixCacheProducer,
    InflightLoadProducer,
    MMEmbeddingsCacheProducer,
    PredictedTTFTProducer,
    # profile handlers and the deciders they ask
    SingleProfileHandler,
    DisaggProfileHandler,
    AlwaysDisaggMultimodalDecider,
    AlwaysDisaggPDDecider,
    PrefixBasedPDDecider,
    AdaptiveEncodeDecider,
    # routing headers for the other stages' pods (PreRequest, before the request is sent)
    PrefillHeaderHandler,
    EncoderHeaderHandler,
    # filters
    DecodeFilter,
    EncodeFilter,
    PrefillFilter,
    PrefixCacheAffinityFilter,
    MMEmbeddingsCacheAffinityFilter,
    PredictedTTFTSLOFilter,
    # scorers
    ActiveRequestScorer,
    DecodeSlackScorer,
    KVCacheUtilizationScorer,
    LoadAwareScorer,
    LoraAffinityScorer,
    MMEmbeddingsCacheScorer,
    NoHitLRUScorer,
    PredictedTTFTScorer,
    PrefixCacheScorer,
    QueueScorer,
    TokenLoadScorer,
    # pickers
    MaxScorePicker,
    RandomPicker,
    RoundRobinPicker,
    WeightedRandomPicker,
)

__all__ = ["BUILTIN_PLUGINS"]
