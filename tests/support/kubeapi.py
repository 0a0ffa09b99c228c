"""A small Kubernetes API server on loopback: list and watch of pods, InferencePools and
InferenceObjectives.

No API server can run here, so the tests speak the real protocol to the real client library
instead: ``GET .../pods`` (list, with ``labelSelector``), the same URL with ``watch=true`` and
``resourceVersion`` (a stream of newline-delimited JSON events, ended after ``timeoutSeconds``),
``BOOKMARK`` events when asked, and ``410 Gone`` (an ``ERROR`` event with a ``Status`` object) for
a version older than the server keeps — what an API server does after etcd compaction.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

POD_PATH = "/api/v1/namespaces/{ns}/pods"
POOL_PATH = "/apis/inference.networking.k8s.io/v1/namespaces/{ns}/inferencepools"
OBJECTIVE_PATH = "/apis/inference.networking.x-k8s.io/v1alpha2/namespaces/{ns}/inferenceobjectives"


def pod(
    name: str,
    ip: str | None,
    *,
    labels: dict[str, str] | None = None,
    ready: bool = True,
    deleting: bool = False,
) -> dict[str, Any]:
    """A Pod object as the API returns it (only the fields discovery reads, plus identity)."""
    meta: dict[str, Any] = {"name": name, "namespace": "ns", "uid": f"uid-{name}", "labels": labels or {}}
    if deleting:
        meta["deletionTimestamp"] = "2026-12-01T00:00:00Z"
    status: dict[str, Any] = {
        "phase": "Running",
        "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
    }
    if ip is not None:
        status["podIP"] = ip
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "status": status}


def inference_pool(name: str, match_labels: dict[str, str], ports: list[int]) -> dict[str, Any]:
    return {
        "apiVersion": "inference.networking.k8s.io/v1",
        "kind": "InferencePool",
        "metadata": {"name": name, "namespace": "ns", "uid": f"uid-pool-{name}"},
        "spec": {
            "selector": {"matchLabels": match_labels},
            "targetPorts": [{"number": p} for p in ports],
            "endpointPickerRef": {"name": "mmgate-epp", "portNumber": {"number": 9002}},
        },
    }


def inference_objective(name: str, pool: str, priority: object = None, **pool_ref: object) -> dict[str, Any]:
    """An InferenceObjective referring to ``pool`` (``priority`` None: unset; ``pool_ref``: more
    fields of the reference, such as ``group`` or ``kind``)."""
    spec: dict[str, Any] = {"poolRef": {"name": pool, **pool_ref}}
    if priority is not None:
        spec["priority"] = priority
    return {
        "apiVersion": "inference.networking.x-k8s.io/v1alpha2",
        "kind": "InferenceObjective",
        "metadata": {"name": name, "namespace": "ns", "uid": f"uid-objective-{name}"},
        "spec": spec,
    }


def _flag(value: str | None) -> bool:
    """A boolean query parameter as the API server parses it (Go's strconv.ParseBool)."""
    return value in ("1", "t", "T", "true", "True", "TRUE")


def _matches(obj: dict[str, Any], label_selector: str | None, field_selector: str | None) -> bool:
    labels = obj["metadata"].get("labels") or {}
    for term in filter(None, (label_selector or "").split(",")):
        key, _, value = term.partition("=")
        if labels.get(key) != value:
            return False
    for term in filter(None, (field_selector or "").split(",")):
        key, _, value = term.partition("=")
        if key == "metadata.name" and obj["metadata"]["name"] != value:
            return False
    return True


@dataclass
class Kind:
    """One resource collection: current objects, and the event log watches replay from."""

    objects: dict[str, dict[str, Any]] = field(default_factory=dict)
    log: list[tuple[int, str, dict[str, Any]]] = field(default_factory=list)


class FakeKubeAPI:
    """Objects are changed with :meth:`put` / :meth:`delete`; watches see each change once."""

    def __init__(self, *, objectives: bool = True) -> None:
        """``objectives=False``: a cluster without the InferenceObjective resource type (404)."""
        self.objectives = objectives
        self.version = 100
        self.compacted = 0  # versions at or below this answer 410 Gone to a watch
        self.kinds = {"pods": Kind(), "inferencepools": Kind(), "inferenceobjectives": Kind()}
        self.changed = asyncio.Condition()
        self.watches = 0  # watch requests served (tests wait on it to know a watch is open)
        self.lists = 0
        self._runner: web.AppRunner | None = None
        self.port = 0

    # -- changes -------------------------------------------------------------------------------

    async def put(self, kind: str, obj: dict[str, Any]) -> None:
        await self._change(
            kind, "MODIFIED" if obj["metadata"]["name"] in self.kinds[kind].objects else "ADDED", obj
        )

    async def delete(self, kind: str, name: str) -> None:
        obj = self.kinds[kind].objects[name]
        await self._change(kind, "DELETED", obj)

    async def _change(self, kind: str, event: str, obj: dict[str, Any]) -> None:
        self.version += 1
        obj = json.loads(json.dumps(obj))
        obj["metadata"]["resourceVersion"] = str(self.version)
        store = self.kinds[kind]
        if event == "DELETED":
            store.objects.pop(obj["metadata"]["name"], None)
        else:
            store.objects[obj["metadata"]["name"]] = obj
        store.log.append((self.version, event, obj))
        async with self.changed:
            self.changed.notify_all()

    async def compact(self) -> None:
        """Forget history: every open or new watch from an older version gets 410 Gone."""
        self.compacted = self.version
        async with self.changed:
            self.changed.notify_all()

    async def bookmark(self) -> None:
        """Ask open watches that want bookmarks to send one at the current version."""
        self.version += 1
        for store in self.kinds.values():
            store.log.append((self.version, "BOOKMARK", {}))
        async with self.changed:
            self.changed.notify_all()

    # -- server --------------------------------------------------------------------------------

    async def start(self) -> str:
        app = web.Application()
        app.router.add_get(POD_PATH, self._handler("pods"))
        app.router.add_get(POOL_PATH, self._handler("inferencepools"))
        if self.objectives:
            app.router.add_get(OBJECTIVE_PATH, self._handler("inferenceobjectives"))
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        host, self.port = self._runner.addresses[0][:2]
        return f"http://{host}:{self.port}"

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    def kubeconfig(self) -> str:
        """A kubeconfig document pointing the real client at this server (no credentials)."""
        return (
            "apiVersion: v1\nkind: Config\ncurrent-context: test\n"
            f"clusters:\n- name: test\n  cluster:\n    server: http://127.0.0.1:{self.port}\n"
            "contexts:\n- name: test\n  context:\n    cluster: test\n    user: test\n    namespace: ns\n"
            "users:\n- name: test\n  user: {}\n"
        )

    def _handler(self, kind: str) -> Any:
        async def handle(request: web.Request) -> web.StreamResponse:
            q = request.query
            if _flag(q.get("watch")):
                return await self._watch(request, kind)
            self.lists += 1
            items = [
                o
                for o in self.kinds[kind].objects.values()
                if _matches(o, q.get("labelSelector"), q.get("fieldSelector"))
            ]
            return web.json_response(
                {
                    "kind": "List",
                    "apiVersion": "v1",
                    "metadata": {"resourceVersion": str(self.version)},
                    "items": items,
                }
            )

        return handle

    async def _watch(self, request: web.Request, kind: str) -> web.StreamResponse:
        q = request.query
        since = int(q.get("resourceVersion") or self.version)
        want_bookmarks = _flag(q.get("allowWatchBookmarks"))
        timeout = float(q.get("timeoutSeconds") or 300)
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        await response.prepare(request)
        self.watches += 1
        store = self.kinds[kind]
        deadline = asyncio.get_running_loop().time() + timeout
        with contextlib.suppress(ConnectionError, asyncio.CancelledError):
            while True:
                if since <= self.compacted:
                    gone = {
                        "type": "ERROR",
                        "object": {
                            "kind": "Status",
                            "apiVersion": "v1",
                            "status": "Failure",
                            "reason": "Expired",
                            "message": f"too old resource version: {since}",
                            "code": 410,
                        },
                    }
                    await response.write(json.dumps(gone).encode() + b"\n")
                    break
                for version, event, obj in store.log:
                    if version <= since:
                        continue
                    since = version
                    if event == "BOOKMARK":
                        if want_bookmarks:
                            mark = {"kind": "Pod", "metadata": {"resourceVersion": str(version)}}
                            await response.write(
                                json.dumps({"type": "BOOKMARK", "object": mark}).encode() + b"\n"
                            )
                        continue
                    if _matches(obj, q.get("labelSelector"), q.get("fieldSelector")):
                        await response.write(json.dumps({"type": event, "object": obj}).encode() + b"\n")
                left = deadline - asyncio.get_running_loop().time()
                if left <= 0:
                    break
                async with self.changed:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self.changed.wait(), timeout=min(left, 0.5))
        with contextlib.suppress(ConnectionError):
            await response.write_eof()
        return response
