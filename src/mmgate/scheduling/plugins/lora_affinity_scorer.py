"""``lora-affinity-scorer``: prefer pods that have the request's LoRA adapter loaded, then pods
with room to load it (llm-d's scorer of the same name; no parameters, as in llm-d).

A request names an adapter by its ``model`` (vLLM serves adapters under their own names); it is an
adapter when a candidate's ``/v1/models`` lists that name with a ``parent``
(:class:`mmgate.vllm.lora.LoraState`). Per endpoint, from its latest ``vllm:lora_requests_info``:

=========================================================================  =====
the adapter is among the running ones                                       1.0
fewer adapters running or waiting than ``max_lora`` (room to load it)       0.8
the adapter is among the waiting ones (it will be loaded when a slot frees)  0.6
otherwise (every slot busy with other adapters), or metrics missing/stale   0.0
=========================================================================  =====

Loading an adapter costs its load time before the first token, and on a pod whose slots are all
busy with other adapters the request waits for one to drain: both are what this score avoids.
A request for a base model, or a model no candidate lists as an adapter, scores 1.0 everywhere
(nothing to prefer; llm-d would score the base model's name like an adapter's and so rank pods with
free adapter slots above full ones for a request that needs none). Prefix and encoder affinity are
other scorers' business and are unchanged: weights decide how they mix.
"""

from __future__ import annotations

from mmgate.scheduling.contracts import NoParams, Scorer
from mmgate.scheduling.types import EndpointState, SchedulingRequest

LOADED, ROOM, WAITING, BUSY = 1.0, 0.8, 0.6, 0.0


class LoraAffinityScorer(Scorer[NoParams]):
    type_name = "lora-affinity-scorer"

    def score(self, request: SchedulingRequest, endpoints: list[EndpointState]) -> list[float]:
        adapter = request.view.model
        now, staleness = request.now, request.staleness_s
        states = []
        is_adapter = False
        for ep in endpoints:
            m = ep.metrics
            lora = None if m is None or now - m.scraped_at > staleness else m.lora
            states.append(lora)
            if lora is not None and adapter in lora.adapters:
                is_adapter = True
        if not adapter or not is_adapter:
            return [1.0] * len(endpoints)
        out = []
        for lora in states:
            if lora is None:
                out.append(BUSY)
            elif adapter in lora.running:
                out.append(LOADED)
            elif lora.room():
                out.append(ROOM)
            elif adapter in lora.waiting:
                out.append(WAITING)
            else:
                out.append(BUSY)
        return out
