"""llm-d's ``token-producer`` ``estimate`` backend, count for count.

The config structs keep llm-d's YAML spelling (``estimate.image.dynamic.factor`` ...) so the
scheduler can decode an llm-d ``EndpointPickerConfig`` into them with ``msgspec.convert``.
Semantics follow llm-d-router ``dataproducer/tokenizer/mm_estimate.go``: zero or missing fields fall
back to built-in defaults, every count is at least 1, integer division truncates.

One deliberate difference: llm-d at the snapshot in ``reference/llmd.md`` prices audio as
ceil(bytes/4). mmgate prices audio by duration (the shape of llm-d's open audio-estimator PR: a
per-second rate plus a fixed overhead), because audio tokens follow length, not bytes.
"""

from __future__ import annotations

from typing import Literal

import msgspec

from mmgate.tokens.rules import Count

DEFAULT_IMAGE_WIDTH = 640
DEFAULT_IMAGE_HEIGHT = 360
IMAGE_TOKEN_FACTOR = 1024
DEFAULT_VIDEO_WIDTH = 640
DEFAULT_VIDEO_HEIGHT = 360
DEFAULT_VIDEO_DURATION = 10.0
DEFAULT_VIDEO_SAMPLE_FPS = 2.0
DEFAULT_VIDEO_SOURCE_FPS = 24.0
VIDEO_TOKEN_FACTOR = 1024
DEFAULT_AUDIO_DURATION = 10.0
DEFAULT_AUDIO_TOKENS_PER_SECOND = 12.5
DEFAULT_AUDIO_OVERHEAD_TOKENS = 14


class _Strict(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    pass


class Resolution(_Strict):
    width: int = 0
    height: int = 0


class ImageDefaults(_Strict):
    """What an image the gateway cannot measure (a URL it does not fetch, a payload it cannot
    probe) is priced as, in llm-d's spelling. The one declaration of these keys: llm-d's
    ``estimate`` block extends it, mmgate's ``exact`` block (:mod:`mmgate.tokens.served`) takes it
    as is, and both resolve to the one value ``PricingConfig.default_image`` falls back to."""

    defaultResolution: Resolution | None = None


class VideoDefaults(_Strict):
    """What a video the gateway cannot measure (and whose request has no ``x-llm-d-video-*``
    headers) is priced as; see :class:`ImageDefaults`."""

    defaultResolution: Resolution | None = None
    defaultDuration: float = 0.0


class AudioDefaults(_Strict):
    """How long an audio clip the gateway cannot measure is taken to be; see :class:`ImageDefaults`."""

    defaultDuration: float = 0.0


class StaticImage(_Strict):
    staticToken: int = 0


class DynamicImage(_Strict):
    factor: int = 0


class ImageEstimate(ImageDefaults):
    mode: Literal["", "dynamic", "static"] = ""
    static: StaticImage | None = None
    dynamic: DynamicImage | None = None


class StaticFrame(_Strict):
    numTokensPerFrame: int = 0


class DynamicFrame(_Strict):
    factor: int = 0


class TokensPerFrame(_Strict):
    mode: Literal["", "dynamic", "static"] = ""
    static: StaticFrame | None = None
    dynamic: DynamicFrame | None = None


class SampledFrames(_Strict):
    sampleFPS: float = 0.0
    temporalPatchSize: int = 0


class StridedFrames(_Strict):
    defaultSourceFPS: float = 0.0
    frameStride: int = 0


class Frames(_Strict):
    mode: Literal["", "sampled", "strided"] = ""
    minFrames: int = 0
    maxFrames: int = 0
    sampled: SampledFrames | None = None
    strided: StridedFrames | None = None


class VideoEstimate(VideoDefaults):
    tokensPerFrame: TokensPerFrame | None = None
    frames: Frames | None = None
    maxVideoTokens: int = 0


class StaticAudio(_Strict):
    numTokens: int = 0


class DynamicAudio(_Strict):
    tokensPerSecond: float = 0.0
    overheadTokens: int = 0


class AudioEstimate(AudioDefaults):
    mode: Literal["", "dynamic", "static"] = ""
    maxAudioTokens: int = 0
    static: StaticAudio | None = None
    dynamic: DynamicAudio | None = None


class EstimateConfig(_Strict):
    """The ``estimate`` block of llm-d's token-producer parameters (audio is mmgate's addition)."""

    image: ImageEstimate | None = None
    video: VideoEstimate | None = None
    audio: AudioEstimate | None = None


def _or(value: float, default: float) -> float:
    return value if value > 0 else default


def _pixels_over(width: int, height: int, factor: int) -> int:
    n = (width * height) // factor
    return n if n > 0 else 1


class Estimator:
    """The resolved estimate: defaults applied once so each count is a few integer operations."""

    __slots__ = (
        "audio_cap",
        "audio_default_s",
        "audio_overhead",
        "audio_rate",
        "audio_static",
        "frame_factor",
        "frame_static",
        "frames_max",
        "frames_min",
        "image_default",
        "image_factor",
        "image_static",
        "sample_fps",
        "source_fps",
        "stride",
        "strided",
        "temporal",
        "video_cap",
        "video_default",
        "video_default_s",
    )

    def __init__(self, cfg: EstimateConfig | None = None) -> None:
        cfg = cfg or EstimateConfig()
        img = cfg.image or ImageEstimate()
        res = img.defaultResolution or Resolution()
        self.image_default = (
            int(_or(res.width, DEFAULT_IMAGE_WIDTH)),
            int(_or(res.height, DEFAULT_IMAGE_HEIGHT)),
        )
        self.image_static: int | None = None
        if img.mode == "static":
            self.image_static = img.static.staticToken if img.static and img.static.staticToken > 0 else 1
        self.image_factor = int(_or(img.dynamic.factor if img.dynamic else 0, IMAGE_TOKEN_FACTOR))

        vid = cfg.video or VideoEstimate()
        vres = vid.defaultResolution or Resolution()
        self.video_default = (
            int(_or(vres.width, DEFAULT_VIDEO_WIDTH)),
            int(_or(vres.height, DEFAULT_VIDEO_HEIGHT)),
        )
        self.video_default_s = _or(vid.defaultDuration, DEFAULT_VIDEO_DURATION)
        self.video_cap = vid.maxVideoTokens
        tpf = vid.tokensPerFrame or TokensPerFrame()
        self.frame_static: int | None = None
        if tpf.mode == "static":
            self.frame_static = (
                tpf.static.numTokensPerFrame if tpf.static and tpf.static.numTokensPerFrame > 0 else 1
            )
        self.frame_factor = int(_or(tpf.dynamic.factor if tpf.dynamic else 0, VIDEO_TOKEN_FACTOR))
        frames = vid.frames or Frames()
        self.strided = frames.mode == "strided"
        self.frames_min = frames.minFrames
        self.frames_max = frames.maxFrames
        sampled = frames.sampled or SampledFrames()
        self.sample_fps = _or(sampled.sampleFPS, DEFAULT_VIDEO_SAMPLE_FPS)
        self.temporal = sampled.temporalPatchSize
        strided = frames.strided or StridedFrames()
        self.source_fps = _or(strided.defaultSourceFPS, DEFAULT_VIDEO_SOURCE_FPS)
        self.stride = strided.frameStride if strided.frameStride >= 1 else 1

        aud = cfg.audio or AudioEstimate()
        self.audio_static: int | None = None
        if aud.mode == "static":
            self.audio_static = aud.static.numTokens if aud.static and aud.static.numTokens > 0 else 1
        dyn = aud.dynamic or DynamicAudio()
        self.audio_rate = _or(dyn.tokensPerSecond, DEFAULT_AUDIO_TOKENS_PER_SECOND)
        self.audio_overhead = dyn.overheadTokens if dyn.overheadTokens > 0 else DEFAULT_AUDIO_OVERHEAD_TOKENS
        self.audio_default_s = _or(aud.defaultDuration, DEFAULT_AUDIO_DURATION)
        self.audio_cap = aud.maxAudioTokens

    def image(self, width: int | None, height: int | None) -> Count:
        """``static``: staticToken (or 1); ``dynamic``: w*h//factor (min 1), defaultResolution if unknown."""
        if self.image_static is not None:
            return Count(self.image_static)
        if not width or not height or width <= 0 or height <= 0:
            width, height = self.image_default
        return Count(_pixels_over(width, height, self.image_factor))

    def frame_count(self, duration_s: float | None, source_fps: float | None) -> int:
        """``strided``: duration*fps//frameStride; ``sampled``: duration*sampleFPS, then // temporalPatchSize.
        Both clamp to [minFrames, maxFrames] before the temporal merge, as llm-d does."""
        duration = duration_s if duration_s and duration_s > 0 else self.video_default_s
        if self.strided:
            fps = source_fps if source_fps and source_fps > 0 else self.source_fps
            n = int(duration * fps) // self.stride
        else:
            n = int(duration * self.sample_fps)
        if self.frames_min > 0 and n < self.frames_min:
            n = self.frames_min
        if self.frames_max > 0 and n > self.frames_max:
            n = self.frames_max
        if not self.strided and self.temporal > 1:
            n //= self.temporal
        return n

    def tokens_per_frame(self, width: int | None, height: int | None) -> int:
        if self.frame_static is not None:
            return self.frame_static
        if not width or not height or width <= 0 or height <= 0:
            width, height = self.video_default
        return _pixels_over(width, height, self.frame_factor)

    def video(
        self, width: int | None, height: int | None, duration_s: float | None, source_fps: float | None
    ) -> Count:
        """min(frames * tokensPerFrame, maxVideoTokens), at least 1."""
        tokens = self.frame_count(duration_s, source_fps) * self.tokens_per_frame(width, height)
        if self.video_cap > 0 and tokens > self.video_cap:
            tokens = self.video_cap
        return Count(max(tokens, 1))

    def audio(self, duration_s: float | None) -> Count:
        """``static``: numTokens; ``dynamic``: overhead + int(rate * seconds), capped, at least 1."""
        if self.audio_static is not None:
            return Count(self.audio_static)
        duration = duration_s if duration_s and duration_s > 0 else self.audio_default_s
        tokens = self.audio_overhead + int(self.audio_rate * duration)
        if self.audio_cap > 0 and tokens > self.audio_cap:
            tokens = self.audio_cap
        return Count(max(tokens, 1))


def parse_estimate(raw: object) -> EstimateConfig:
    """Decode an llm-d ``estimate`` mapping (from YAML/JSON) strictly; errors name the bad field."""
    try:
        return msgspec.convert(raw or {}, EstimateConfig)
    except msgspec.ValidationError as exc:
        raise ValueError(f"invalid token-producer estimate config: {exc}") from None
