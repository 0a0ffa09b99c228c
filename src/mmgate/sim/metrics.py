"""One simulated pod's ``/metrics``: vLLM's families (:mod:`mmgate.modelserver.metrics`) and the
simulator's own, which say whether the process keeps up with the simulated GPU (a pod whose step
loop falls behind reports slower timings than its profile)."""

from __future__ import annotations

import time

from mmgate.modelserver.metrics import MetricLines, ServerMetrics
from mmgate.sim.lora import LoraSlots
from mmgate.vllm.lora import LORA_INFO, lora_info_labels


class PodMetrics(ServerMetrics):
    """A simulated pod's counters; times are simulated seconds, as a real pod would report them."""

    def __init__(self, *, model_name: str, prefix_caching: bool = True, engine: str = "0") -> None:
        super().__init__(model_name=model_name, prefix_caching=prefix_caching, engine=engine)
        self.driver_lag = 0.0
        self.busy_sim_s = 0.0  # simulated seconds of engine steps run
        self.encoder_s = 0.0  # of which the vision/audio encoder
        self.busy_wall_s = 0.0  # wall seconds those steps took (x time scale); > sim means falling behind
        self.lora: LoraSlots | None = None  # the pod's adapter slots, when it serves LoRA adapters

    def extra(self, out: MetricLines) -> None:
        if self.lora is not None:
            # vLLM's labels only (no engine/model_name); the value is when the state was rendered.
            slots = self.lora
            labels = lora_info_labels(slots.running, slots.waiting, slots.max_loras)
            out.head(LORA_INFO, "gauge", "Running stats on lora requests.")
            out.lines.append(
                LORA_INFO + "{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + "} " + repr(time.time())
            )
        out.gauge(
            "mmgate_sim:driver_lag_seconds",
            self.driver_lag,
            "mmgate simulator: how far the pod's step loop runs behind its schedule (CPU saturation).",
        )
        out.counter(
            "mmgate_sim:encoder_seconds",
            self.encoder_s,
            "mmgate simulator: simulated seconds the encoder ran (inside engine steps).",
        )
        out.counter(
            "mmgate_sim:busy_sim_seconds",
            self.busy_sim_s,
            "mmgate simulator: simulated seconds of engine steps run.",
        )
        out.counter(
            "mmgate_sim:busy_wall_seconds",
            self.busy_wall_s,
            "mmgate simulator: wall seconds (divided by the time scale) those steps took; "
            "above busy_sim_seconds when the process cannot keep up.",
        )
