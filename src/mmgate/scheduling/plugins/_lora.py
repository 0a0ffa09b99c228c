"""Which LoRA adapter a request names: its model, when a candidate's ``/v1/models`` lists that
name as an adapter (vLLM serves adapters under their own names, with the base model as parent)."""

from __future__ import annotations

from collections.abc import Sequence

from mmgate.scheduling.types import EndpointState
from mmgate.vllm.lora import Adapter


def adapter_of(model: str, endpoints: Sequence[EndpointState]) -> Adapter | None:
    """The adapter ``model`` names on the first candidate that lists it; None for a base model."""
    for ep in endpoints:
        m = ep.metrics
        lora = None if m is None else m.lora
        if lora is not None:
            adapter = lora.adapters.get(model)
            if adapter is not None:
                return adapter
    return None
