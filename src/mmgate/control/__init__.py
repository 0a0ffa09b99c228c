"""The request controller shared by every transport (HTTP gateway, discrete-event benchmark, and
next Envoy ext_proc and the E/PD sidecar): candidates, admission, the scheduling decision, the
lifecycle around it, retries. Transports only move bytes. See docs/architecture.md, "request flow".
"""

from mmgate.control.admission import AdmissionSettings, Overloaded, client_key
from mmgate.control.circuit_breaker import BreakerSettings, State
from mmgate.control.controller import (
    Attempt,
    ControlObserver,
    ControlSettings,
    Flight,
    NoCandidates,
    RequestController,
    Usage,
)
from mmgate.control.decision import Decision, EndpointPicker, NoEndpoint
from mmgate.control.scheduler_picker import SchedulerPicker

__all__ = [
    "AdmissionSettings",
    "Attempt",
    "BreakerSettings",
    "ControlObserver",
    "ControlSettings",
    "Decision",
    "EndpointPicker",
    "Flight",
    "NoCandidates",
    "NoEndpoint",
    "Overloaded",
    "RequestController",
    "SchedulerPicker",
    "State",
    "Usage",
    "client_key",
]
