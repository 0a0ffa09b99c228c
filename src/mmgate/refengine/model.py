"""Getting a model: a tiny randomly initialised one for tests and demos, or a real one from disk.

The tiny model is a real architecture at toy size (two decoder layers of width 64, a one-block
vision tower: Qwen2-VL, Qwen2.5-VL, Idefics3 or SmolVLM), built from a config with a fixed seed and a
tokenizer trained offline (:mod:`mmgate.refengine.tiny_tokenizer`), so it runs every code path a real
checkpoint runs, in milliseconds, and gives the same (meaningless but deterministic) replies on
every machine.

A real model is read from a local directory with ``local_files_only``: nothing is ever downloaded
(a directory of the Hugging Face cache, ``.../snapshots/<rev>``, works as any other). Images are
preprocessed with the PIL backend, so torchvision is not needed.
"""

from __future__ import annotations

import functools
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from transformers import (
    AutoConfig,
    AutoImageProcessor,
    AutoModelForImageTextToText,
    AutoTokenizer,
    Idefics3Config,
    Idefics3ForConditionalGeneration,
    Qwen2_5_VLConfig,
    Qwen2_5_VLForConditionalGeneration,
    Qwen2VLConfig,
    Qwen2VLForConditionalGeneration,
    SmolVLMConfig,
    SmolVLMForConditionalGeneration,
)
from transformers.models.idefics3.image_processing_pil_idefics3 import Idefics3ImageProcessorPil
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil
from transformers.models.smolvlm.image_processing_pil_smolvlm import SmolVLMImageProcessorPil

from mmgate.refengine import tiny_tokenizer
from mmgate.refengine.idefics3 import Idefics3, SmolVLM
from mmgate.refengine.qwen2_vl import Qwen2VL
from mmgate.refengine.vlm import VisionLanguageModel
from mmgate.tokens.exact.files import ModelFilesError, load_model_files

__all__ = ["TINY_ARCHS", "ModelLoadError", "load_model", "save_tiny", "tiny_model"]

TINY_ARCHS = ("qwen2-vl", "qwen2.5-vl", "idefics3", "smolvlm")
"""Architectures :func:`tiny_model` builds."""

FAMILIES: dict[str, Callable[..., VisionLanguageModel]] = {
    "qwen2_vl": Qwen2VL,
    "qwen2_5_vl": Qwen2VL,
    "idefics3": Idefics3,
    "smolvlm": SmolVLM,
}
"""The adapter that runs a checkpoint, by its config's ``model_type``."""

TINY_PIXELS = (56 * 56, 28 * 28 * 16)
"""The tiny Qwen models' processor bounds: every image becomes 4 to 16 tokens (a real Qwen2-VL's
default is 4 to 16,384), so tests with several images stay fast."""

_TEXT = {  # the decoder stack every tiny model shares
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 8192,
}
_QWEN_VISION: dict[str, dict[str, Any]] = {
    # Qwen2-VL: a ViT of width embed_dim merged into the text width (hidden_size)
    "qwen2-vl": {"embed_dim": 32, "hidden_size": 64, "mlp_ratio": 2},
    # Qwen2.5-VL: windowed attention (block 0 attends fully), merged into out_hidden_size
    "qwen2.5-vl": {
        "hidden_size": 32,
        "intermediate_size": 64,
        "out_hidden_size": 64,
        "window_size": 56,
        "fullatt_block_indexes": [0],
    },
}
_QWEN_CLASSES: dict[str, tuple[Any, Any]] = {
    "qwen2-vl": (Qwen2VLConfig, Qwen2VLForConditionalGeneration),
    "qwen2.5-vl": (Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration),
}
_IDEFICS3_CLASSES: dict[str, tuple[Any, Any, Any]] = {
    "idefics3": (Idefics3Config, Idefics3ForConditionalGeneration, Idefics3ImageProcessorPil),
    "smolvlm": (SmolVLMConfig, SmolVLMForConditionalGeneration, SmolVLMImageProcessorPil),
}


class ModelLoadError(ValueError):
    """A model directory the engine cannot run; the message names the directory and what is wrong."""


@functools.cache
def _tokenizer_files(family: str) -> dict[str, str]:
    """The tiny tokenizer's two files for a template family (trained once per process: ~0.3 s)."""
    special, template = tiny_tokenizer.TEMPLATES[family]
    with tempfile.TemporaryDirectory(prefix="mmgate-tiny-tok-") as tmp:
        folder = tiny_tokenizer.build(Path(tmp), vocab_size=1024, special=special, chat_template=template)
        return {p.name: p.read_text() for p in folder.iterdir()}


def _tokenizer(family: str) -> Any:
    with tempfile.TemporaryDirectory(prefix="mmgate-tiny-tok-") as tmp:
        for name, text in _tokenizer_files(family).items():
            (Path(tmp) / name).write_text(text)
        return AutoTokenizer.from_pretrained(tmp, local_files_only=True)


def _seeded(model_class: Any, config: Any, seed: int) -> Any:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return model_class(config)


def _tiny_qwen(arch: str, seed: int) -> tuple[Any, Any, Any, int]:
    tokenizer = _tokenizer("qwen")
    ids = {t: int(tokenizer.convert_tokens_to_ids(t)) for t in tiny_tokenizer.QWEN_TOKENS}
    config_class, model_class = _QWEN_CLASSES[arch]
    config = config_class(
        text_config={
            **_TEXT,
            "vocab_size": len(tokenizer),
            "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [2, 3, 3]},
            "bos_token_id": int(tokenizer.convert_tokens_to_ids("<|endoftext|>")),
            "eos_token_id": ids["<|im_end|>"],
            "pad_token_id": int(tokenizer.pad_token_id),
        },
        vision_config={
            "depth": 1,
            "num_heads": 2,
            "patch_size": 14,
            "spatial_merge_size": 2,
            "temporal_patch_size": 2,
            **_QWEN_VISION[arch],
        },
        image_token_id=ids["<|image_pad|>"],
        video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"],
    )
    processor = Qwen2VLImageProcessorPil(min_pixels=TINY_PIXELS[0], max_pixels=TINY_PIXELS[1])
    return _seeded(model_class, config, seed), tokenizer, processor, ids["<|im_end|>"]


def _tiny_idefics3(arch: str, seed: int) -> tuple[Any, Any, Any, int]:
    """Tiles of 32 px, 8-px patches pixel-shuffled by 2: 4 image tokens per tile, and an image of
    any size is cut into 2x2 tiles plus the global view (20 image tokens). SmolVLM is the same
    shape under its own classes."""
    config_class, model_class, processor_class = _IDEFICS3_CLASSES[arch]
    tokenizer = _tokenizer("idefics3")
    end = int(tokenizer.convert_tokens_to_ids("<end_of_utterance>"))
    config = config_class(
        text_config={
            "model_type": "llama",
            **_TEXT,
            "vocab_size": len(tokenizer),
            "bos_token_id": int(tokenizer.convert_tokens_to_ids("<|endoftext|>")),
            "eos_token_id": end,
            "pad_token_id": int(tokenizer.pad_token_id),
        },
        vision_config={
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "image_size": 32,
            "patch_size": 8,
        },
        scale_factor=2,
        image_token_id=int(tokenizer.convert_tokens_to_ids("<image>")),
    )
    processor = processor_class(
        size={"longest_edge": 64}, max_image_size={"longest_edge": 32}, do_image_splitting=True
    )
    return _seeded(model_class, config, seed), tokenizer, processor, end


def _tiny_parts(arch: str, seed: int) -> tuple[Any, Any, Any, int]:
    """(model, tokenizer, image processor, end-of-turn id) of the tiny ``arch``."""
    if arch not in TINY_ARCHS:
        raise ValueError(f"unknown tiny architecture {arch!r}; choose one of {', '.join(TINY_ARCHS)}")
    build = _tiny_idefics3 if arch in _IDEFICS3_CLASSES else _tiny_qwen
    model, tokenizer, processor, end = build(arch, seed)
    model.generation_config.eos_token_id = end
    return model, tokenizer, processor, end


def tiny_model(arch: str = "qwen2-vl", seed: int = 0) -> VisionLanguageModel:
    """A randomly initialised model of ``arch`` (one of :data:`TINY_ARCHS`), the same for a seed."""
    model, tokenizer, processor, end = _tiny_parts(arch, seed)
    family = FAMILIES[model.config.model_type]
    return family(
        f"mmgate/tiny-{arch}", model, tokenizer, processor, tokenizer.chat_template, frozenset({end})
    )


def save_tiny(folder: Path, arch: str = "qwen2-vl", seed: int = 0) -> Path:
    """Write the tiny model as a checkpoint directory :func:`load_model` reads (demos, tests)."""
    model, tokenizer, processor, _ = _tiny_parts(arch, seed)
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    processor.save_pretrained(folder)
    return folder


def load_model(directory: str | Path, name: str | None = None) -> VisionLanguageModel:
    """The model in ``directory`` (config, weights, tokenizer, preprocessor config, chat template),
    read from local files only. ``name`` is the served model id (default: the directory's name)."""
    folder = Path(directory).expanduser()
    if not (folder / "config.json").is_file():
        raise ModelLoadError(
            f"{folder} has no config.json: give a local model directory (nothing is downloaded)"
        )
    config = AutoConfig.from_pretrained(folder, local_files_only=True)
    family = FAMILIES.get(config.model_type)
    if family is None:
        supported = ", ".join(sorted(FAMILIES))
        raise ModelLoadError(
            f"{folder}: model_type {config.model_type!r} is not supported (supported: {supported})"
        )
    try:
        template = load_model_files(folder).chat_template
    except ModelFilesError as exc:
        raise ModelLoadError(str(exc)) from None
    tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    processor = AutoImageProcessor.from_pretrained(folder, local_files_only=True, backend="pil")  # type: ignore[no-untyped-call]
    model = AutoModelForImageTextToText.from_pretrained(folder, local_files_only=True, dtype=torch.float32)
    eos = model.generation_config.eos_token_id if model.generation_config is not None else None
    if eos is None:
        eos = config.text_config.eos_token_id
    eos_ids = frozenset(int(e) for e in (eos if isinstance(eos, list) else [eos]) if e is not None)
    return family(name or folder.name, model, tokenizer, processor, template, eos_ids)
