"""What a prober found in a media header."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ProbeResult:
    """Metadata read from the bytes themselves; ``None`` where the format does not say."""

    format: str  # by content: "png", "jpeg", "mp4", "webm", "wav", "opus", ...
    width: int | None = None
    height: int | None = None
    duration_s: float | None = None
    fps: float | None = None
    sample_rate: int | None = None
    channels: int | None = None
    pages: int | None = None  # documents
