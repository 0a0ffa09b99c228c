"""The endpoint picker: a pure, llm-d-compatible plugin pipeline.

>>> from mmgate.config import load_config
>>> from mmgate.scheduling import build_scheduler, EndpointState, SchedulingRequest
>>> scheduler = build_scheduler(load_config("examples/aggregated.yaml").picker)   # doctest: +SKIP
>>> result = scheduler.schedule(SchedulingRequest(view, "req-1"), endpoints, now)  # doctest: +SKIP
>>> result.target.name                                                            # doctest: +SKIP
'10.0.0.3:8000'

See :class:`Scheduler` for the call order (schedule → on_started → pre_request → on_first_token
→ on_finished) and docs/plugins/ for every plugin.
"""

from mmgate.scheduling.build import build_scheduler
from mmgate.scheduling.contracts import (
    EndpointAware,
    Filter,
    Picker,
    Plugin,
    PluginHandle,
    Producer,
    ProfileHandler,
    Scorer,
)
from mmgate.scheduling.lifecycle import PreRequest, RequestLifecycle
from mmgate.scheduling.profile import Profile
from mmgate.scheduling.registry import PluginRegistry, builtin_registry, plugin_types
from mmgate.scheduling.scheduler import Scheduler
from mmgate.scheduling.types import (
    ROLE_LABEL,
    DataKey,
    EndpointState,
    InFlight,
    Metrics,
    MetricsView,
    NoEndpointsError,
    ProfileResult,
    SchedulingRequest,
    SchedulingResult,
)

__all__ = [
    "ROLE_LABEL",
    "DataKey",
    "EndpointAware",
    "EndpointState",
    "Filter",
    "InFlight",
    "Metrics",
    "MetricsView",
    "NoEndpointsError",
    "Picker",
    "Plugin",
    "PluginHandle",
    "PluginRegistry",
    "PreRequest",
    "Producer",
    "Profile",
    "ProfileHandler",
    "ProfileResult",
    "RequestLifecycle",
    "Scheduler",
    "SchedulingRequest",
    "SchedulingResult",
    "Scorer",
    "build_scheduler",
    "builtin_registry",
    "plugin_types",
]
