"""Processing time per scheduling plugin, as one Prometheus histogram labelled by plugin.

GIE's endpoint picker records the same (``scheduler_plugin_duration_seconds`` by extension point,
plugin type and name), so a slow scorer shows by name instead of hiding in the decision's total
(``mmgate_decision_latency_seconds``). The scheduler hands each call's seconds to the function
:meth:`PluginTimes.__call__` returned for that plugin when it was built.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry

from mmgate.gateway.loopmetrics import LoopHistogram
from mmgate.scheduling import Plugin

# A plugin takes from about a microsecond (a weight lookup) to a few hundred (a prefix walk).
PLUGIN_BUCKETS = (1e-6, 2.5e-6, 5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 5e-3, 0.025)


class PluginTimes:
    """A :class:`~mmgate.scheduling.contracts.PluginTimer` that fills one histogram."""

    def __init__(self) -> None:
        self.histogram = LoopHistogram(
            "mmgate_scheduler_plugin_duration_seconds",
            "Processing time of one scheduling plugin call, by extension point, plugin type and name",
            ["extension_point", "plugin_type", "plugin_name"],
            buckets=PLUGIN_BUCKETS,
        )

    def __call__(self, extension_point: str, plugin: Plugin[Any]) -> Callable[[float], None]:
        return self.histogram.labels(extension_point, plugin.type_name, plugin.name).observe

    def register(self, registry: CollectorRegistry) -> None:
        registry.register(self.histogram)
