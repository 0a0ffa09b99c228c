"""Flow control: requests held in the gateway while every endpoint they could go to is saturated,
and released by priority, then fair share across flows (by request count, or by media-aware
cost), then order within a flow. Off unless the config's ``featureGates`` lists ``flowControl``.
See docs/flow-control.md.

- :mod:`~mmgate.control.flow.classify`: the flow key (fairness id, priority) and TTFT target;
- :mod:`~mmgate.control.flow.saturation`: whether an endpoint is full;
- :mod:`~mmgate.control.flow.queues`: held requests, per-flow queues, bands, bounds;
- :mod:`~mmgate.control.flow.policies`: fairness across flows and the cost model;
- :mod:`~mmgate.control.flow.dispatcher`: the pure core that holds, releases and refuses;
- :mod:`~mmgate.control.flow.settings`: what the config sections mean;
- :mod:`~mmgate.control.flow.gate`: a request's held form, for the request controller.
"""

from mmgate.control.flow.classify import FlowKey, Objective
from mmgate.control.flow.dispatcher import STATUS, FlowDispatcher
from mmgate.control.flow.gate import FlowGate
from mmgate.control.flow.settings import FlowSettings, flow_settings_of

__all__ = ["STATUS", "FlowDispatcher", "FlowGate", "FlowKey", "FlowSettings", "Objective", "flow_settings_of"]
