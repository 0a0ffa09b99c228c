"""Speech encoders: Whisper (fixed 1,500 positions per 30-s window) and Qwen2-Audio.

Whisper (vLLM ``whisper.py``): every started 30-s chunk is padded to 3,000 mel frames and encoded
to ``max_source_positions`` = 1,500 positions. Qwen2-Audio (transformers
``qwen2_audio/processing_qwen2_audio.py``): mel frames ``ceil(samples/160)`` capped at 3,000 (one
30-s window), then two halvings; wrapped in ``<|audio_bos|>`` ... ``<|audio_eos|>``. Qwen2.5-Omni's
audio tower is the same front end with a 300-s window (:mod:`mmgate.tokens.families.qwen`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

from mmgate.tokens.rules import Count, Family


@dataclass(frozen=True, slots=True)
class WhisperParams:
    chunk_length: int = 30
    max_source_positions: int = 1500


def whisper_audio(p: WhisperParams, duration_s: float) -> Count:
    return Count(math.ceil(duration_s / p.chunk_length - 1e-9) * p.max_source_positions)


@dataclass(frozen=True, slots=True)
class Qwen2AudioParams:
    sampling_rate: int = 16_000
    hop_length: int = 160
    chunk_length: int = 30


class MelFrontEnd(Protocol):
    """The Whisper feature extractor's settings a mel-frame count depends on (HF names)."""

    @property
    def sampling_rate(self) -> int: ...
    @property
    def hop_length(self) -> int: ...
    @property
    def chunk_length(self) -> int: ...


def qwen2_audio_tokens(p: MelFrontEnd, samples: int) -> int:
    """Audio embeddings for ``samples``: mel frames (one per ``hop_length`` samples, at most one
    ``chunk_length``-second window), halved by the stride-2 convolution, halved again by pooling."""
    frames = min(-(-samples // p.hop_length), p.chunk_length * p.sampling_rate // p.hop_length)
    return (((frames - 1) // 2 + 1) - 2) // 2 + 1


def qwen2_audio(p: Qwen2AudioParams, duration_s: float) -> Count:
    return Count(qwen2_audio_tokens(p, int(duration_s * p.sampling_rate)), 2)


WHISPER = Family(
    "whisper",
    WhisperParams(),
    audio=whisper_audio,
    about="Whisper: 1500 encoder positions per started 30-s window",
)
QWEN2_AUDIO = Family(
    "qwen2-audio",
    Qwen2AudioParams(),
    audio=qwen2_audio,
    about="Qwen2-Audio: 25 tokens per second of audio, up to 750 (30 s)",
)
