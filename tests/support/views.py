"""Request views built directly (no parsing), for the pricing and scheduling tests."""

from __future__ import annotations

from mmgate.request.view import Api, MediaAsset, Modality, RequestView, Source


def image(identity: str, width: int | None = None, height: int | None = None, **kw: object) -> MediaAsset:
    return MediaAsset(
        Modality.IMAGE,
        Source.INLINE,
        identity,
        f"messages[0].content[{identity}]",
        width=width,
        height=height,
        probed=width is not None,
        **kw,  # type: ignore[arg-type]
    )


def video(
    identity: str,
    width: int | None = None,
    height: int | None = None,
    duration_s: float | None = None,
    fps: float | None = None,
) -> MediaAsset:
    return MediaAsset(
        Modality.VIDEO,
        Source.URL,
        identity,
        "messages[0].content[1]",
        width=width,
        height=height,
        duration_s=duration_s,
        fps=fps,
        probed=width is not None,
    )


def audio(identity: str, duration_s: float | None = None) -> MediaAsset:
    return MediaAsset(
        Modality.AUDIO,
        Source.INLINE,
        identity,
        "messages[0].content[2]",
        duration_s=duration_s,
        probed=duration_s is not None,
    )


def view(*parts: str | MediaAsset, model: str = "m") -> RequestView:
    return RequestView(Api.CHAT, model, list(parts))
