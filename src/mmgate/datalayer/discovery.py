"""Where the endpoint list comes from: a static list, or a file that is watched for changes.

The file may be YAML or JSON: a list of addresses, or a mapping with an ``endpoints:`` list. An
entry is an address string (``host:port`` or a URL) or a mapping with ``address`` (or ``url``),
optional ``role`` and ``labels``; the file ``mmgate sim --endpoints-file`` writes works as is.
A plain text file with one address per line works too (one YAML string, split on whitespace).
A file that fails to parse keeps the previous set: a half-written file must not empty the fleet.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from mmgate.datalayer.endpoints import Endpoint, EndpointRegistry, parse_endpoint

log = logging.getLogger("mmgate.datalayer")


# Keys describing an endpoint that discovery reads past (``mmgate sim --endpoints-file`` writes them).
_INFORMATIONAL = frozenset({"name", "model"})
_KEYS = frozenset({"address", "url", "role", "labels", "kv_events", "kv_replay"})


def _entry(item: Any, where: str) -> Endpoint:
    if isinstance(item, str):
        return parse_endpoint(item)
    if isinstance(item, dict):
        address = item.get("address", item.get("url"))
        unknown = set(item) - _KEYS - _INFORMATIONAL
        if unknown or address is None:
            raise ValueError(
                f"{where}: an endpoint entry takes 'address' (or 'url') and optional 'role', 'labels',"
                " 'kv_events', 'kv_replay'" + (f"; unknown: {', '.join(sorted(unknown))}" if unknown else "")
            )
        role = item.get("role")
        labels = item.get("labels") or {}
        if not isinstance(labels, dict):
            raise ValueError(f"{where}.labels: expected a mapping of label to value")
        kv_events, kv_replay = item.get("kv_events"), item.get("kv_replay")
        return parse_endpoint(
            str(address),
            role=None if role is None else str(role),
            labels=labels,
            kv_events=None if kv_events is None else str(kv_events),
            kv_replay=None if kv_replay is None else str(kv_replay),
        )
    raise ValueError(f"{where}: expected an address string or a mapping, got {type(item).__name__}")


def endpoints_from_document(doc: Any, where: str = "endpoints") -> list[Endpoint]:
    """Endpoints from a parsed YAML document (see the module docstring for the shapes)."""
    if doc is None:
        return []
    if isinstance(doc, dict):
        if set(doc) != {"endpoints"}:
            raise ValueError(f"{where}: expected a list or a mapping with only 'endpoints'")
        doc = doc["endpoints"] or []
    if isinstance(doc, str):
        doc = [t for t in doc.replace(",", " ").split() if t]
    if not isinstance(doc, list):
        raise ValueError(f"{where}: expected a list of endpoints")
    found: dict[str, Endpoint] = {}
    for i, item in enumerate(doc):
        endpoint = _entry(item, f"{where}[{i}]")
        found.setdefault(endpoint.name, endpoint)
    return list(found.values())


def read_endpoint_file(path: Path) -> list[Endpoint]:
    text = path.read_text(encoding="utf-8")
    return endpoints_from_document(yaml.safe_load(text), where=str(path))


class StaticDiscovery:
    """A fixed list, applied once."""

    def __init__(self, endpoints: Sequence[Endpoint]) -> None:
        self.endpoints = list(endpoints)

    async def start(self, registry: EndpointRegistry) -> None:
        registry.sync(self.endpoints)

    async def stop(self) -> None:
        return None


class FileDiscovery:
    """Re-reads ``path`` whenever its mtime or size changes (polled; no inotify dependency)."""

    def __init__(self, path: Path, *, poll_interval_s: float = 1.0, static: Sequence[Endpoint] = ()) -> None:
        self.path = path
        self.static = list(static)
        self.poll_interval_s = poll_interval_s
        self._stamp: tuple[int, int] | None = None
        self._task: asyncio.Task[None] | None = None

    def _stat(self) -> tuple[int, int] | None:
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return (st.st_mtime_ns, st.st_size)

    def refresh(self, registry: EndpointRegistry) -> bool:
        """Apply the file if it changed since the last look; return whether the set was synced."""
        stamp = self._stat()
        if stamp is None or stamp == self._stamp:
            return False
        self._stamp = stamp
        try:
            endpoints = read_endpoint_file(self.path)
        except (OSError, ValueError, yaml.YAMLError) as exc:
            log.warning("endpoint file %s not applied: %s", self.path, exc)
            return False
        added, removed = registry.sync([*self.static, *endpoints])
        if added or removed:
            log.info("endpoint file %s: added %s, removed %s", self.path, added, removed)
        return True

    async def start(self, registry: EndpointRegistry) -> None:
        if self._stat() is None:  # e.g. written by a fleet that is still starting: keep looking
            log.warning("endpoint file %s does not exist yet; watching for it", self.path)
            registry.sync(self.static)
        self.refresh(registry)
        self._task = asyncio.create_task(self._watch(registry), name="mmgate-endpoint-file")

    async def _watch(self, registry: EndpointRegistry) -> None:
        while True:
            await asyncio.sleep(self.poll_interval_s)
            self.refresh(registry)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
