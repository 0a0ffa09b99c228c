"""What every transformers vision-language family shares once the engine drives it piecewise.

A family adapter subclasses :class:`TransformersVLM` and supplies what differs: how an image is
preprocessed and how many feature rows it gives, how the prompt expands each image's placeholder,
how the vision tower is called, which submodule is the text model and what position tensor it takes.
Rendering the chat template, embedding a chunk with features written over its image tokens, one
forward pass of the text model over a :class:`transformers.DynamicCache` built from the engine's own
keys and values, and detokenising are the same for all of them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from transformers import Cache, DynamicCache
from transformers.cache_utils import DynamicLayer

from mmgate.refengine.vlm import KV, embed_with_features

__all__ = ["TransformersVLM"]


class TransformersVLM:
    """A loaded transformers model with its tokenizer, image processor and chat template."""

    def __init__(
        self,
        name: str,
        model: Any,
        tokenizer: Any,
        image_processor: Any,
        chat_template: str,
        eos_token_ids: frozenset[int],
    ) -> None:
        self._name = name
        self._model = model.eval()
        self._tokenizer = tokenizer
        self._processor = image_processor
        self._template = chat_template
        self._eos = eos_token_ids
        self._image_token = int(model.config.image_token_id)

    @property
    def name(self) -> str:
        return self._name

    @property
    def eos_token_ids(self) -> frozenset[int]:
        return self._eos

    @property
    def image_token_id(self) -> int:
        return self._image_token

    @property
    def hidden_size(self) -> int:
        return int(self._model.config.text_config.hidden_size)

    @property
    def torch_model(self) -> Any:
        """The transformers model itself (tests compare against its own ``forward``)."""
        return self._model

    def render(self, messages: Sequence[dict[str, Any]]) -> str:
        text = self._tokenizer.apply_chat_template(
            list(messages), chat_template=self._template, tokenize=False, add_generation_prompt=True
        )
        return str(text)

    def embed(self, token_ids: Sequence[int], features: Sequence[torch.Tensor]) -> torch.Tensor:
        return embed_with_features(self._model.get_input_embeddings(), token_ids, self._image_token, features)

    def text_model(self) -> Any:
        """The decoder stack that takes ``inputs_embeds`` (the family's submodule)."""
        raise NotImplementedError

    def position_ids(self, positions: torch.Tensor) -> torch.Tensor:
        """What the text model takes for ``(P, batch, tokens)`` positions (multimodal rope: all)."""
        return positions

    def forward(
        self, embeds: torch.Tensor, positions: torch.Tensor, past: KV | None, mask: torch.Tensor | None
    ) -> tuple[torch.Tensor, KV]:
        cache: Any = _cache_over(past) if past else DynamicCache()
        out = self.text_model()(
            inputs_embeds=embeds,
            position_ids=self.position_ids(positions),
            attention_mask=mask,
            cache=cache,
            use_cache=True,
        )
        logits: torch.Tensor = self._model.lm_head(out.last_hidden_state[:, -1, :])
        return logits, [(layer.keys, layer.values) for layer in cache.layers]

    def detokenize(self, token_ids: Sequence[int]) -> str:
        return str(self._tokenizer.decode(list(token_ids), skip_special_tokens=True))

    def token_ids(self, text: str) -> list[int]:
        """``text`` tokenised with no special tokens added (the template wrote them)."""
        return [int(t) for t in self._tokenizer(text, add_special_tokens=False)["input_ids"]]


def _cache_over(past: KV) -> Any:
    """A transformers cache whose layers hold ``past`` as they are. ``DynamicCache(ddp_cache_data=)``
    would copy every layer's keys and values into fresh tensors first: on a real model's long
    context that copy costs as much as the step's own append."""
    layers: list[Any] = []
    for keys, values in past:
        layer = DynamicLayer()  # type: ignore[no-untyped-call]
        layer.lazy_initialization(keys, values)
        layer.keys, layer.values = keys, values
        layers.append(layer)
    return Cache(layers=layers)
