"""Registry of served model families by name (``mmgate tokens --list`` prints it), and the one
mapping from a served model id to its family (:func:`family_for_model`)."""

from __future__ import annotations

from typing import Any

from mmgate.tokens.families.audio import QWEN2_AUDIO, WHISPER
from mmgate.tokens.families.gemma import GEMMA3, GEMMA4
from mmgate.tokens.families.idefics import IDEFICS3, SMOLVLM
from mmgate.tokens.families.internvl import INTERNVL
from mmgate.tokens.families.llama4 import LLAMA4
from mmgate.tokens.families.llava import LLAVA_1_5, LLAVA_NEXT
from mmgate.tokens.families.phi import PHI3_5_VISION, PHI4_MM
from mmgate.tokens.families.pixtral import PIXTRAL
from mmgate.tokens.families.qwen import QWEN2_5_VL, QWEN2_VL, QWEN3_VL
from mmgate.tokens.families.qwen_omni import QWEN2_5_OMNI
from mmgate.tokens.rules import Family, unknown

FAMILIES: dict[str, Family[Any]] = {
    f.name: f
    for f in (
        QWEN2_VL,
        QWEN2_5_VL,
        QWEN3_VL,
        QWEN2_5_OMNI,
        GEMMA3,
        GEMMA4,
        IDEFICS3,
        SMOLVLM,
        LLAVA_1_5,
        LLAVA_NEXT,
        INTERNVL,
        PIXTRAL,
        LLAMA4,
        PHI3_5_VISION,
        PHI4_MM,
        WHISPER,
        QWEN2_AUDIO,
    )
}

# Spellings people use (HF model_type, marketing names) for the same rules.
ALIASES = {
    "qwen2_vl": "qwen2-vl",
    "qwen2_5_vl": "qwen2.5-vl",
    "qwen3_vl": "qwen3-vl",
    "qwen2_5_omni": "qwen2.5-omni",
    "gemma-3": "gemma3",
    "gemma-4": "gemma4",
    "llava": "llava-1.5",
    "llava_next": "llava-next",
    "llava-1.6": "llava-next",
    "phi3_v": "phi-3.5-vision",
    "phi4mm": "phi-4-multimodal",
    "phi4_multimodal": "phi-4-multimodal",
    "qwen2_audio": "qwen2-audio",
    "mllama4": "llama4",
    # as they appear in Hugging Face model ids (llava-hf/llava-v1.6-..., meta-llama/Llama-4-...)
    "llava-v1.6": "llava-next",
    "llama-4": "llama4",
    "phi-3-vision": "phi-3.5-vision",
    "llava-v1.5": "llava-1.5",
}


def get_family(name: str) -> Family[Any]:
    """The family called ``name`` (case-insensitive); an error listing the valid names otherwise."""
    key = name.strip().lower()
    key = ALIASES.get(key, key)
    family = FAMILIES.get(key)
    if family is None:
        raise unknown("family", name, FAMILIES)
    return family


def family_for_model(model: str) -> str | None:
    """The family whose rules price a served model id, or None when no family matches.

    The id's last path segment (``Qwen/Qwen2.5-VL-7B-Instruct`` → ``qwen2.5-vl-7b-instruct``) is
    matched case-insensitively against every family name and alias as a prefix, and the longest
    match wins, so ``qwen2.5-vl-...`` is Qwen2.5-VL, not Qwen2-VL, and ``llava-v1.6-...`` is
    LLaVA-NeXT, not LLaVA-1.5. The simulator, the gateway and ``mmgate tokens --model`` all use this.
    """
    name = model.strip().lower().rsplit("/", 1)[-1]
    spellings = {**{f: f for f in FAMILIES}, **ALIASES}
    matches = [s for s in spellings if name.startswith(s)]
    return spellings[max(matches, key=len)] if matches else None
