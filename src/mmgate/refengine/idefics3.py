"""The Idefics3 family (Idefics3, SmolVLM) as the engine drives it.

Idefics3 cuts an image into tiles of the vision tower's size plus one downscaled global view; each
tile becomes ``image_seq_len`` image tokens (SigLIP patches, pixel-shuffled by ``scale_factor``),
announced in the prompt by ``<fake_token_around_image>`` and a ``<row_r_col_c>`` (or ``<global-img>``)
tag, rows separated by newlines. So an image's run holds text tokens between its image tokens; its
span runs from the first marker to the last, as vLLM's placeholder range does, and the features are
written over the image tokens only. The prompt expansion is the processor's own
(``Idefics3Processor.replace_image_token``); positions are plain 1-D (a Llama text model).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import torch
from PIL import Image
from transformers import Idefics3Processor
from transformers.models.smolvlm.processing_smolvlm import get_image_prompt_string

from mmgate.refengine.hf_family import TransformersVLM
from mmgate.refengine.vlm import Layout, MediaSpan, ProcessedImage

__all__ = ["Idefics3", "SmolVLM"]

IMAGE = "<image>"


class Idefics3(TransformersVLM):
    """A loaded Idefics3 model with its tokenizer, image processor (PIL backend) and chat template."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._seq_len = int(self._model.model.image_seq_len)

    @functools.cached_property
    def _idefics3_processor(self) -> Any:
        return Idefics3Processor(self._processor, self._tokenizer, image_seq_len=self._seq_len)

    def expand(self, rows: int, cols: int) -> str:
        """The prompt text an image of ``rows`` x ``cols`` tiles stands for, as the processor writes it."""
        return str(self._idefics3_processor.replace_image_token({"rows": [[rows]], "cols": [[cols]]}, 0))

    def text_model(self) -> Any:
        return self._model.model.text_model

    def position_ids(self, positions: torch.Tensor) -> torch.Tensor:
        return positions[0]

    def preprocess(self, image: Image.Image) -> ProcessedImage:
        out = self._processor(images=[[image.convert("RGB")]], return_tensors="pt", return_row_col_info=True)
        grid = torch.tensor([out["rows"][0][0], out["cols"][0][0]])
        tensors = {
            "pixel_values": out["pixel_values"],
            "pixel_attention_mask": out["pixel_attention_mask"],
            "rows_cols": grid,
        }
        return ProcessedImage(tensors, int(out["pixel_values"].shape[1]) * self._seq_len)

    def layout(self, text: str, images: Sequence[tuple[str, ProcessedImage]]) -> Layout:
        pieces = text.split(IMAGE)
        if len(pieces) != len(images) + 1:
            raise ValueError(
                f"the rendered prompt has {len(pieces) - 1} image placeholders for {len(images)} images"
            )
        ids = self.token_ids(pieces[0])
        spans = []
        for (identity, image), piece in zip(images, pieces[1:], strict=True):
            rows, cols = (int(v) for v in image.tensors["rows_cols"])
            run = self.token_ids(self.expand(rows, cols))
            spans.append(MediaSpan(identity, len(ids), len(run)))
            ids += run + self.token_ids(piece)
        return Layout(tuple(ids), tuple(spans), torch.arange(len(ids))[None, :], 0)

    def encode(self, image: ProcessedImage) -> torch.Tensor:
        out = self._model.model.get_image_features(
            image.tensors["pixel_values"], image.tensors["pixel_attention_mask"], return_dict=True
        )
        features: torch.Tensor = out.pooler_output[0]
        return features


class SmolVLM(Idefics3):
    """SmolVLM: Idefics3's tiles, tower and text model; its processor reads the marker tokens' names
    from the tokenizer (with Idefics3's as defaults)."""

    def expand(self, rows: int, cols: int) -> str:
        tok = self._tokenizer
        return str(
            get_image_prompt_string(  # type: ignore[no-untyped-call]
                rows,
                cols,
                self._seq_len,
                getattr(tok, "fake_image_token", "<fake_token_around_image>"),
                getattr(tok, "image_token", IMAGE),
                getattr(tok, "global_image_token", "<global-img>"),
            )
        )
