"""Reference processors from Hugging Face transformers, built without weights, network or torch.

Each helper returns transformers' own answer for one size, computed by the processor code vLLM
calls (``get_number_of_image_patches``, ``_get_num_multimodal_tokens``, ``sample_frames``...).
Processor objects are made with ``object.__new__`` and only the attributes the counting methods
read, because the full constructors want a tokenizer we do not ship. Modules that import torch at
the top but do not use it for counting are loaded with a stand-in ``torch`` module.
"""

from __future__ import annotations

import importlib.util
import math
import random
import sys
import types
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

MAX_SIDE = 8192


def random_sizes(n: int, seed: int) -> list[tuple[int, int]]:
    """(width, height) pairs: fixed extremes plus log-uniform sizes from 1 px to 8K."""
    fixed = [
        (1, 1), (1, 2), (2, 1), (3, 7), (13, 9), (14, 14), (27, 29), (28, 28), (56, 56), (199, 1), (1, 201),
        (640, 360), (640, 480), (1280, 720), (1920, 1080), (1080, 1920), (3840, 2160), (4096, 2160),
        (7680, 4320), (4320, 7680), (8192, 8192), (8192, 64), (64, 8192), (8000, 40),
    ]  # fmt: skip
    rng = random.Random(seed)
    sizes = list(fixed)
    while len(sizes) < n:
        w = int(math.exp(rng.uniform(0, math.log(MAX_SIDE))))
        h = (
            int(math.exp(rng.uniform(0, math.log(MAX_SIDE))))
            if rng.random() < 0.6
            else max(1, int(w * rng.uniform(0.3, 3)))
        )
        sizes.append((max(1, min(w, MAX_SIDE)), max(1, min(h, MAX_SIDE))))
    return sizes


def zeros_image(height: int, width: int, channels_first: bool = True) -> np.ndarray:
    """A zero image of any size without allocating it (every pixel aliases one byte)."""
    shape = (3, height, width) if channels_first else (height, width, 3)
    return np.lib.stride_tricks.as_strided(np.zeros(1, dtype=np.uint8), shape=shape, strides=(0, 0, 0))


def bare(cls: type, **attrs: Any) -> Any:
    """An instance of a processor class with just ``attrs`` (no tokenizer, no hub files)."""
    obj = object.__new__(cls)
    obj.__dict__.update(attrs)
    obj.__dict__["_merge_kwargs"] = lambda **kw: {
        "images_kwargs": {},
        "videos_kwargs": {},
        "audio_kwargs": {},
    }
    return obj


def load_without_torch(package: str, module: str) -> types.ModuleType:
    """Execute a transformers module whose counting code is plain Python but which imports torch."""
    pkg = importlib.import_module(package)
    path = Path(pkg.__file__ or "").parent / f"{module}.py"
    name = f"{package}._mmgate_{module}"
    if name in sys.modules:
        return sys.modules[name]
    stubs = {}
    for stub_name in ("torch", "torchvision", "torchvision.transforms", "torchvision.transforms.v2"):
        if stub_name not in sys.modules:
            stubs[stub_name] = sys.modules[stub_name] = types.ModuleType(stub_name)
    if "torch" in stubs:
        stubs["torch"].Tensor = type("Tensor", (), {})  # type: ignore[attr-defined]  # for annotations
        # decorators applied at import time
        stubs["torch"].compiler = types.SimpleNamespace(disable=lambda fn: fn)  # type: ignore[attr-defined]
    stubs_tv = sys.modules["torchvision.transforms.v2"]
    if not hasattr(stubs_tv, "functional"):
        stubs_tv.functional = types.ModuleType("torchvision.transforms.v2.functional")  # type: ignore[attr-defined]
        sys.modules["torchvision.transforms.v2.functional"] = stubs_tv.functional  # type: ignore[attr-defined]
        stubs["torchvision.transforms.v2.functional"] = stubs_tv.functional  # type: ignore[attr-defined]
    try:
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
    finally:
        for stub_name in stubs:
            sys.modules.pop(stub_name, None)
    return mod


@cache
def qwen3_video_module() -> types.ModuleType:
    return load_without_torch("transformers.models.qwen3_vl", "video_processing_qwen3_vl")


class _IntRange:
    """What ``torch.arange(...).int()`` gives, computed by numpy with the same float semantics."""

    def __init__(self, *args: float) -> None:
        self.values = np.arange(*args, dtype=np.float64)

    def int(self) -> np.ndarray:
        return self.values.astype(np.int32)


@cache
def qwen2_video_module() -> types.ModuleType:
    """Qwen2-VL's video processor; its ``sample_frames`` only needs ``torch.arange`` (given by numpy)."""
    mod = load_without_torch("transformers.models.qwen2_vl", "video_processing_qwen2_vl")
    # The module's own view of torch gets the numpy arange: when the real torch is already imported
    # (another test loaded it), patching ``mod.torch.arange`` would change torch for every later test.
    own = types.ModuleType("torch_with_numpy_arange")
    own.__dict__.update(vars(mod.torch))  # type: ignore[attr-defined]
    own.arange = _IntRange  # type: ignore[attr-defined]
    mod.torch = own  # type: ignore[attr-defined]
    return mod
