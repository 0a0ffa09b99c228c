"""Small builders shared by the scheduling tests."""

from __future__ import annotations

from typing import Any

from mmgate.config import parse_config
from mmgate.request.view import MediaAsset
from mmgate.scheduling import (
    EndpointState,
    Metrics,
    PluginRegistry,
    Scheduler,
    SchedulingRequest,
    build_scheduler,
)
from support import views
from support.views import view


def endpoints(n: int, **metrics: Any) -> list[EndpointState]:
    return [EndpointState(name=f"10.0.0.{i}:8000", metrics=Metrics(**metrics)) for i in range(n)]


def image(identity: str, width: int = 1280, height: int = 720) -> MediaAsset:
    """A probed image: the scheduling tests price it, so it always has a size."""
    return views.image(identity, width, height)


def request(*parts: str | MediaAsset, rid: str = "r", debug: bool = False) -> SchedulingRequest:
    return SchedulingRequest(view(*(parts or ("hello",))), rid, debug=debug)


def scheduler(
    yaml_plugins: list[dict[str, Any]],
    profile: list[dict[str, Any]] | None = None,
    *,
    seed: int = 0,
    registry: PluginRegistry | None = None,
) -> Scheduler:
    """Build from plugin specs; ``profile`` lists pluginRefs (default: no profiles → injected)."""
    doc: dict[str, Any] = {"plugins": yaml_plugins}
    if profile is not None:
        doc["schedulingProfiles"] = [{"name": "default", "plugins": profile}]
    return build_scheduler(parse_config(doc).picker, seed=seed, registry=registry)
