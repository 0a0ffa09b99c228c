"""An encode-only engine in a process of its own, for the E/PD test: the tiny model, a
:class:`~mmgate.refengine.transfer.FeatureServer` on a free loopback port, and a line protocol on
stdin/stdout standing in for the HTTP encode leg (the server's own tests cover that leg). Each
stdin line is a JSON ``messages`` array; each answer line is its ``ec_transfer_params``."""

from __future__ import annotations

import json
import sys

import torch

from mmgate.refengine.model import tiny_model
from mmgate.refengine.prompt import prompt_from_messages
from mmgate.refengine.runtime import Engine, EngineConfig
from mmgate.refengine.transfer import FeatureServer


def main() -> None:
    torch.set_num_threads(1)
    engine = Engine(tiny_model("qwen2-vl", seed=0), EngineConfig(enable_prefix_caching=False))
    server = FeatureServer().start()
    print(json.dumps({"ready": server.address}), flush=True)
    for line in sys.stdin:
        features = engine.encode(prompt_from_messages(json.loads(line)))
        params = server.publish(features)
        print(json.dumps({"ec_transfer_params": params, "encoded": engine.stages.encoded_items}), flush=True)
    server.close()


if __name__ == "__main__":
    main()
