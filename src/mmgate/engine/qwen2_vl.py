"""The Qwen2-VL family (Qwen2-VL, Qwen2.5-VL) as the engine drives it.

Transformers' ``forward`` takes pixels and recomputes the vision tower and the whole prompt on every
call; the engine instead calls the model's own pieces one by one, so a cached image's features and a
cached prefix's keys and values can stand in for their computation:

* the image processor (the PIL backend: no torchvision) resizes to a multiple of 28 px within the
  processor's pixel bounds and cuts 14 px patches; an image fills ``t*h*w / merge²`` pad tokens;
* ``get_image_features`` runs the vision tower and the patch merger for one image;
* ``get_rope_index`` lays out multimodal rope: text advances one position per token on all three
  axes, an image's tokens take (time, row, column) positions and advance the text by
  ``max(h, w) / merge``, so every token after an image sits ``position_delta`` behind its index;
* the text model runs over input embeddings with an explicit position tensor and a
  :class:`transformers.DynamicCache` built from the engine's own keys and values.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from PIL import Image
from transformers import DynamicCache

from mmgate.engine.vlm import KV, Layout, MediaSpan, ProcessedImage

__all__ = ["Qwen2VL"]

IMAGE_PAD = "<|image_pad|>"


class Qwen2VL:
    """A loaded Qwen2-VL-family model with its tokenizer, image processor and chat template."""

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
        self._merge = int(model.config.vision_config.spatial_merge_size)

    @property
    def name(self) -> str:
        return self._name

    @property
    def eos_token_ids(self) -> frozenset[int]:
        return self._eos

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

    def preprocess(self, image: Image.Image) -> ProcessedImage:
        out = self._processor(images=[image.convert("RGB")], return_tensors="pt")
        grid = out["image_grid_thw"]
        tensors = {"pixel_values": out["pixel_values"], "image_grid_thw": grid}
        return ProcessedImage(tensors, int(grid.prod().item()) // self._merge**2)

    def layout(self, text: str, images: Sequence[tuple[str, ProcessedImage]]) -> Layout:
        pieces = text.split(IMAGE_PAD)
        if len(pieces) != len(images) + 1:
            raise ValueError(
                f"the rendered prompt has {len(pieces) - 1} image placeholders for {len(images)} images"
            )
        expanded = pieces[0]
        for (_, image), piece in zip(images, pieces[1:], strict=True):
            expanded += IMAGE_PAD * image.num_tokens + piece
        ids = [int(t) for t in self._tokenizer(expanded, add_special_tokens=False)["input_ids"]]
        spans = []
        start = 0
        for identity, image in images:
            offset = ids.index(self._image_token, start)
            spans.append(MediaSpan(identity, offset, image.num_tokens))
            start = offset + image.num_tokens
        input_ids = torch.tensor([ids])
        if not images:
            positions = torch.arange(len(ids)).expand(3, -1)
            return Layout(tuple(ids), (), positions, 0)
        kinds = (input_ids == self._image_token).int()
        grids = torch.cat([image.tensors["image_grid_thw"] for _, image in images])
        rope, delta = self._model.model.get_rope_index(
            input_ids, mm_token_type_ids=kinds, image_grid_thw=grids
        )
        return Layout(tuple(ids), tuple(spans), rope[:, 0, :], int(delta.item()))

    def encode(self, image: ProcessedImage) -> torch.Tensor:
        out = self._model.model.get_image_features(
            image.tensors["pixel_values"], image.tensors["image_grid_thw"], return_dict=True
        )
        features: torch.Tensor = out.pooler_output[0]
        return features

    def embed(self, token_ids: Sequence[int], features: Sequence[tuple[int, torch.Tensor]]) -> torch.Tensor:
        embeds: torch.Tensor = self._model.get_input_embeddings()(torch.tensor(list(token_ids)))
        for row, rows in features:
            embeds[row : row + rows.shape[0]] = rows.to(embeds.dtype)
        return embeds

    def forward(
        self, embeds: torch.Tensor, positions: torch.Tensor, past: KV | None, mask: torch.Tensor | None
    ) -> tuple[torch.Tensor, KV]:
        cache: Any = DynamicCache(ddp_cache_data=past) if past else DynamicCache()
        out = self._model.model.language_model(
            inputs_embeds=embeds, position_ids=positions, attention_mask=mask, cache=cache, use_cache=True
        )
        logits: torch.Tensor = self._model.lm_head(out.last_hidden_state[:, -1, :])
        return logits, [(layer.keys, layer.values) for layer in cache.layers]

    def detokenize(self, token_ids: Sequence[int]) -> str:
        return str(self._tokenizer.decode(list(token_ids), skip_special_tokens=True))
