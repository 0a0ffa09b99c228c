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
* the text model (``language_model``) takes the three rope axes as its position tensor.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from PIL import Image

from mmgate.refengine.hf_family import TransformersVLM
from mmgate.refengine.vlm import Layout, MediaSpan, ProcessedImage

__all__ = ["Qwen2VL"]

IMAGE_PAD = "<|image_pad|>"


class Qwen2VL(TransformersVLM):
    """A loaded Qwen2-VL-family model with its tokenizer, image processor and chat template."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._merge = int(self._model.config.vision_config.spatial_merge_size)

    def text_model(self) -> Any:
        return self._model.model.language_model

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
        ids = self.token_ids(expanded)
        spans = []
        start = 0
        for identity, image in images:
            offset = ids.index(self._image_token, start)
            spans.append(MediaSpan(identity, offset, image.num_tokens))
            start = offset + image.num_tokens
        if not images:
            return Layout(tuple(ids), (), torch.arange(len(ids)).expand(3, -1), 0)
        input_ids = torch.tensor([ids])
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
