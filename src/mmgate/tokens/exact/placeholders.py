"""Where each media item sits in a family's prompt, and how its processor expands it.

A chat template prints one placeholder token per media item (Qwen-VL:
``<|vision_start|><|image_pad|><|vision_end|>``; LLaVA: ``<image>``); the model's processor, and
vLLM's prompt update after it, repeat that token once per encoder output position, which is the
``tokens`` of the item's price (:mod:`mmgate.tokens.families`). The repeated run is the item's
placeholder range: vLLM hashes the item's identity into every block the run overlaps, at the run's
offset, so the :class:`~mmgate.tokens.sequence.MMItem` of an item is that run (its start/end
markers are ordinary text tokens the template printed).

``string`` is what vLLM puts in the message text for templates that take content as one string
(``get_placeholder_str``); templates that loop over content parts print the markers themselves.

Families whose processors rewrite more than one token (Gemma 3's ``<start_of_image>`` becoming
newlines, markers and soft tokens; Qwen3-VL video's per-frame timestamps) are not listed: their
requests keep the pseudo-token layout.
"""

from __future__ import annotations

from dataclasses import dataclass

from mmgate.request.view import Modality


@dataclass(frozen=True, slots=True)
class Placeholder:
    token: str  # the token the processor repeats
    string: str  # what vLLM inserts in string-format message text

    def __post_init__(self) -> None:
        if self.token not in self.string:
            raise ValueError(f"placeholder {self.token!r} must appear in {self.string!r}")


_QWEN_IMAGE = Placeholder("<|image_pad|>", "<|vision_start|><|image_pad|><|vision_end|>")
_QWEN_VIDEO = Placeholder("<|video_pad|>", "<|vision_start|><|video_pad|><|vision_end|>")
_LLAVA_IMAGE = Placeholder("<image>", "<image>")

PLACEHOLDERS: dict[str, dict[Modality, Placeholder]] = {
    "qwen2-vl": {Modality.IMAGE: _QWEN_IMAGE, Modality.VIDEO: _QWEN_VIDEO},
    "qwen2.5-vl": {Modality.IMAGE: _QWEN_IMAGE, Modality.VIDEO: _QWEN_VIDEO},
    "qwen3-vl": {Modality.IMAGE: _QWEN_IMAGE},
    "llava-1.5": {Modality.IMAGE: _LLAVA_IMAGE},
    "llava-next": {Modality.IMAGE: _LLAVA_IMAGE},
}
"""Per pricing family (its :data:`~mmgate.tokens.families.FAMILIES` name), per modality."""


def placeholders_for(family: str | None) -> dict[Modality, Placeholder]:
    """The family's placeholders; empty for text-only models and unlisted families."""
    return PLACEHOLDERS.get(family or "", {})
