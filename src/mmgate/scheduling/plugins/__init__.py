"""Built-in plugins, one module per llm-d type name. Importing this package registers them all."""

from mmgate.scheduling.plugins import (
    kv_cache_utilization_scorer,
    load_aware_scorer,
    max_score_picker,
    queue_scorer,
    random_picker,
    round_robin_picker,
    single_profile_handler,
    weighted_random_picker,
)

__all__ = [
    "kv_cache_utilization_scorer",
    "load_aware_scorer",
    "max_score_picker",
    "queue_scorer",
    "random_picker",
    "round_robin_picker",
    "single_profile_handler",
    "weighted_random_picker",
]
