"""One tiny Qwen2-VL per test session (built in well under a second, but torch is slow to warm).

torch runs on one thread here: the machine's cores are shared, and intra-op threads fighting
for them make a millisecond step take hundreds of milliseconds."""

from __future__ import annotations

import pytest
import torch

from mmgate.refengine.model import tiny_model
from mmgate.refengine.vlm import VisionLanguageModel

torch.set_num_threads(1)


@pytest.fixture(scope="session")
def tiny() -> VisionLanguageModel:
    return tiny_model("qwen2-vl", seed=0)
