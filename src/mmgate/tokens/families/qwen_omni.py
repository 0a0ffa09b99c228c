"""Qwen2.5-Omni: Qwen2.5-VL's vision rules and Qwen2-Audio's front end with a 300-s window.

transformers ``qwen2_5_omni/processing_qwen2_5_omni.py`` with the hub's
``Qwen/Qwen2.5-Omni-7B/preprocessor_config.json``:

- images: ``Qwen2VLImageProcessor`` (14-px patches merged 2x2, 3,136..12,845,056 px), the same
  ``smart_resize`` as Qwen2.5-VL; prompt ``<|vision_bos|><|IMAGE|>×N<|vision_eos|>``;
- video: the processor's own ``size`` for clips (128·28²..768·28² px a frame), frames sampled at
  2 fps in pairs, as Qwen2.5-VL; ``<|vision_bos|><|VIDEO|>×N<|vision_eos|>``;
- audio: ``WhisperFeatureExtractor`` with ``chunk_length`` 300 (``nb_max_frames`` 30,000: five
  minutes, where Qwen2-Audio stops at 30 s), ``ceil(samples / 160)`` mel frames, then the audio
  tower's stride-2 convolution and pooling (``_get_feat_extract_output_lengths``): 25 embeddings a
  second, at most 7,500; ``<|audio_bos|><|AUDIO|>×N<|audio_eos|>``.

Audio carried inside a video (``use_audio_in_video``) interleaves both in 2-s chunks; vLLM's
OpenAI server takes a video's audio only when asked, so clips here are priced as frames only.
"""

from __future__ import annotations

from dataclasses import dataclass

from mmgate.tokens.families.audio import qwen2_audio_tokens
from mmgate.tokens.families.qwen import QwenVLParams, qwen2_video, qwen_image
from mmgate.tokens.rules import Count, Family


@dataclass(frozen=True, slots=True)
class QwenOmniParams(QwenVLParams):
    """Qwen-VL's processor parameters plus the Whisper feature extractor's (HF names)."""

    sampling_rate: int = 16_000
    hop_length: int = 160
    chunk_length: int = 300


def qwen_omni_audio(p: QwenOmniParams, duration_s: float) -> Count:
    return Count(qwen2_audio_tokens(p, int(duration_s * p.sampling_rate)), 2)


QWEN2_5_OMNI = Family(
    "qwen2.5-omni",
    QwenOmniParams(min_pixels=3136, max_pixels=12_845_056),
    image=qwen_image,
    video=qwen2_video,
    audio=qwen_omni_audio,
    about="Qwen2.5-Omni-7B: Qwen2.5-VL images and video; audio 25 tokens/s up to 7500 (300 s)",
)
