"""What the engine needs from a vision-language model family, and the shapes it passes around.

The runtime (:mod:`mmgate.refengine.runtime`) owns the caches, the scheduling and the KV; a family
adapter (:mod:`mmgate.refengine.qwen2_vl`) owns what differs between architectures: how a chat renders,
how an image is preprocessed and how many placeholder tokens it fills, how the vision tower encodes
it, how rope positions are laid out, and one forward step of the language model over embeddings.
Keeping the split there is what lets the runtime splice cached image features and cached KV into a
model's forward pass without knowing the model.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch
from PIL import Image

__all__ = ["KV", "Layout", "MediaSpan", "ProcessedImage", "VisionLanguageModel", "embed_with_features"]

KV = list[tuple[torch.Tensor, torch.Tensor]]
"""Keys and values per decoder layer, each ``(batch, kv_heads, tokens, head_dim)``."""


@dataclass(frozen=True, slots=True)
class ProcessedImage:
    """An image as its vision tower takes it (e.g. ``pixel_values`` and ``image_grid_thw``) and the
    number of placeholder tokens its features fill in the prompt."""

    tensors: dict[str, torch.Tensor]
    num_tokens: int

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.tensors.values())


@dataclass(frozen=True, slots=True)
class MediaSpan:
    """An image's run in the prompt, from its first placeholder token to its last, markers
    included, as vLLM's ``PlaceholderRange`` spans it (satisfies :class:`mmgate.vllm.blocks.MediaSpanLike`,
    so block keys carry it as vLLM's do)."""

    identity: str
    offset: int
    length: int


@dataclass(frozen=True, slots=True)
class Layout:
    """A prompt as the language model reads it: token ids, where each image's features go, and the
    rope positions (``(P, tokens)``: P is 3 for multimodal rope, 1 otherwise). A generated token at
    index ``i`` of the sequence sits at position ``i + position_delta`` on every axis."""

    token_ids: tuple[int, ...]
    spans: tuple[MediaSpan, ...]
    positions: torch.Tensor
    position_delta: int


class VisionLanguageModel(Protocol):
    """One loaded model of a supported family. Every method runs under ``torch.inference_mode``
    (the runtime enters it); none keeps state between calls."""

    @property
    def name(self) -> str:
        """The model id the engine serves (``/v1/models``)."""
        ...

    @property
    def eos_token_ids(self) -> frozenset[int]: ...

    @property
    def image_token_id(self) -> int:
        """The token an image's features are written over (each image's run may hold others too:
        tile markers, row separators)."""
        ...

    @property
    def hidden_size(self) -> int:
        """Width of the language model's embeddings (and so of an image's features)."""
        ...

    def render(self, messages: Sequence[dict[str, Any]]) -> str:
        """The chat template applied with a generation prompt, one placeholder per image part."""
        ...

    def preprocess(self, image: Image.Image) -> ProcessedImage: ...

    def layout(self, text: str, images: Sequence[tuple[str, ProcessedImage]]) -> Layout:
        """Tokenise ``text`` with each image's placeholder expanded to its tokens; ``images`` are
        ``(identity, processed)`` in prompt order."""
        ...

    def encode(self, image: ProcessedImage) -> torch.Tensor:
        """The image's features, ``(num_tokens, hidden)``, as the language model embeds them."""
        ...

    def embed(self, token_ids: Sequence[int], features: Sequence[torch.Tensor]) -> torch.Tensor:
        """Input embeddings ``(tokens, hidden)`` of ``token_ids``, the ``features`` rows (joined, in
        order) written over its image tokens; no features leaves them as they are."""
        ...

    def forward(
        self, embeds: torch.Tensor, positions: torch.Tensor, past: KV | None, mask: torch.Tensor | None
    ) -> tuple[torch.Tensor, KV]:
        """One pass of the language model over ``embeds`` ``(batch, tokens, hidden)`` at
        ``positions`` ``(P, batch, tokens)`` after ``past``; ``mask`` ``(batch, past + tokens)`` marks
        real tokens with 1 when rows are left-padded. Returns the last position's logits
        ``(batch, vocab)`` and the keys and values including the new tokens."""
        ...

    def detokenize(self, token_ids: Sequence[int]) -> str: ...


def embed_with_features(
    table: torch.nn.Module, token_ids: Sequence[int], image_token: int, features: Sequence[torch.Tensor]
) -> torch.Tensor:
    """``table``'s embeddings of ``token_ids`` with ``features`` written over the ``image_token``
    positions, in order (the merge every family's forward does, on one chunk)."""
    ids = torch.tensor(list(token_ids))
    embeds: torch.Tensor = table(ids)
    if features:
        rows = torch.cat(list(features)).to(embeds.dtype)
        mask = ids == image_token
        if int(mask.sum()) != rows.shape[0]:
            raise ValueError(f"{rows.shape[0]} feature rows for {int(mask.sum())} image tokens")
        embeds[mask] = rows
    return embeds
