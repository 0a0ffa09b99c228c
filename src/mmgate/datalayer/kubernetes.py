"""Endpoints from the Kubernetes API: pods by label selector, or the pods of an ``InferencePool``.

What a platform team already has is a namespace of vLLM pods, usually grouped by an
``InferencePool`` (``inference.networking.k8s.io/v1``: a label ``selector``, ``targetPorts``,
an ``endpointPickerRef``). This source follows them the way Kubernetes clients are meant to
(API conventions, "Efficient detection of changes"): one *list* gives the current set and a
``resourceVersion``; a *watch* from that version streams ``ADDED`` / ``MODIFIED`` / ``DELETED``
and ``BOOKMARK`` events; when the server has compacted past the version it answers
``410 Gone`` and the client lists again.

Rules that keep routing safe:

- a pod is an endpoint only while it has an IP, its ``Ready`` condition is ``True`` and it is
  not being deleted (``deletionTimestamp``): a terminating pod gets no new requests;
- each target port of a pod is its own endpoint (``ip:port``), as GIE defines ``targetPorts``;
- the role comes from the pod label ``llm-d.ai/role`` (prefill, decode, encode, both);
- a relist after ``410 Gone`` or a broken watch replaces the set only once the list has
  succeeded, so a flaky API server never empties the fleet; an endpoint that disappears is
  removed from the registry, whose removal listeners make every index forget it;
- with an ``InferencePool``, a change of its selector or ports re-lists the pods at once.

With an ``InferencePool`` and flow control on, the namespace's ``InferenceObjective`` resources
that refer to the pool are followed the same way (:meth:`KubernetesDiscovery.follow_objectives`,
:mod:`mmgate.datalayer.objectives`): their priorities are flow control's.

The client is ``kubernetes_asyncio`` (in-cluster service account, or a kubeconfig file).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from mmgate.config.strict import ConfigError
from mmgate.datalayer.endpoints import Endpoint, EndpointRegistry, parse_endpoint
from mmgate.datalayer.objectives import GROUP as OBJECTIVE_GROUP
from mmgate.datalayer.objectives import PLURAL as OBJECTIVE_PLURAL
from mmgate.datalayer.objectives import VERSION as OBJECTIVE_VERSION
from mmgate.datalayer.objectives import Listener, ObjectiveSet

log = logging.getLogger("mmgate.datalayer")

ROLE_LABEL = "llm-d.ai/role"
POOL_GROUP = "inference.networking.k8s.io"
POOL_VERSION = "v1"
POOL_PLURAL = "inferencepools"
WATCH_TIMEOUT_S = 300  # the server ends each watch after this; the client resumes from its version
RETRY_S = 1.0  # pause after a failed list or a broken watch before trying again
RETRY_MAX_S = 60.0  # longest pause after a 403 or 404 (no RBAC rule, resource type not installed)


@dataclass(frozen=True, slots=True)
class KubernetesSettings:
    """Where to look. Exactly one of ``pod_selector`` (with ``target_ports``) and ``pool`` is set."""

    namespace: str = "default"
    pod_selector: str | None = None  # a label selector, e.g. "app=vllm,model=qwen3-vl"
    target_ports: tuple[int, ...] = ()
    pool: str | None = None  # an InferencePool name in ``namespace``
    kubeconfig: str | None = None  # None: in-cluster service account, else this file
    role_label: str = ROLE_LABEL

    def __post_init__(self) -> None:
        if (self.pod_selector is None) == (self.pool is None):
            raise ValueError("kubernetes discovery needs exactly one of podSelector and inferencePool")
        if self.pod_selector is not None and not self.target_ports:
            raise ValueError("kubernetes discovery by podSelector needs targetPorts (the model server port)")
        for port in self.target_ports:
            if not 0 < port < 65536:
                raise ValueError(f"kubernetes targetPorts: {port} is not a port number")


@dataclass(frozen=True, slots=True)
class PoolTarget:
    """What an ``InferencePool`` says: which pods (a selector string) and which ports."""

    selector: str
    ports: tuple[int, ...]


def selector_of(match_labels: Mapping[str, str]) -> str:
    """``{"app": "vllm"}`` → ``"app=vllm"``: the equality-based selector syntax of the API."""
    return ",".join(f"{k}={v}" for k, v in sorted(match_labels.items()))


def pool_target(pool: Mapping[str, Any]) -> PoolTarget:
    """The selector and ports of an ``InferencePool`` object (as the API returns it).

    Raises ``ValueError`` naming the field when the pool cannot be used: an empty selector would
    select every pod of the namespace, which is never what a pool means.
    """
    spec = pool.get("spec") or {}
    selector = spec.get("selector") or {}
    match = selector.get("matchLabels") or {}
    if not isinstance(match, dict) or not match:
        raise ValueError("InferencePool spec.selector.matchLabels is empty")
    ports: list[int] = []
    for i, port in enumerate(spec.get("targetPorts") or []):
        number = port.get("number") if isinstance(port, dict) else None
        if not isinstance(number, int) or not 0 < number < 65536:
            raise ValueError(f"InferencePool spec.targetPorts[{i}].number is not a port number")
        ports.append(number)
    if not ports:
        raise ValueError("InferencePool spec.targetPorts is empty")
    return PoolTarget(selector_of({str(k): str(v) for k, v in match.items()}), tuple(ports))


def pod_is_serving(pod: Mapping[str, Any]) -> bool:
    """Ready, with an IP, and not terminating: the only pods that may receive new requests."""
    meta = pod.get("metadata") or {}
    if meta.get("deletionTimestamp"):
        return False
    status = pod.get("status") or {}
    if not status.get("podIP"):
        return False
    for condition in status.get("conditions") or []:
        if condition.get("type") == "Ready":
            return bool(condition.get("status") == "True")
    return False


def endpoints_of_pod(
    pod: Mapping[str, Any], ports: Sequence[int], role_label: str = ROLE_LABEL
) -> list[Endpoint]:
    """One endpoint per target port of a serving pod; none for a pod that is not serving."""
    if not pod_is_serving(pod):
        return []
    labels = {str(k): str(v) for k, v in ((pod.get("metadata") or {}).get("labels") or {}).items()}
    ip = str(pod["status"]["podIP"])
    host = f"[{ip}]" if ":" in ip else ip
    role = labels.get(role_label)
    return [parse_endpoint(f"{host}:{port}", role=role, labels=labels) for port in ports]


class KubernetesDiscovery:
    """Keeps the registry equal to the serving pods (plus any static endpoints) by list + watch."""

    def __init__(self, settings: KubernetesSettings, *, static: Sequence[Endpoint] = ()) -> None:
        self.settings = settings
        self.static = list(static)
        self._pods: dict[str, Mapping[str, Any]] = {}  # uid -> pod object as last seen
        self._target: PoolTarget | None = (
            PoolTarget(settings.pod_selector, settings.target_ports) if settings.pod_selector else None
        )
        self._retarget = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._api: Any = None
        self._registry: EndpointRegistry | None = None
        self.synced = asyncio.Event()  # set once the first pod list has been applied
        self.relists = 0  # lists after the first (410 Gone, broken watches): for tests and logs
        self._objectives: ObjectiveSet | None = None  # watched when follow_objectives() was called

    @property
    def target(self) -> PoolTarget | None:
        """The selector and ports in force (from the settings, or the pool once read)."""
        return self._target

    async def start(self, registry: EndpointRegistry) -> None:
        from kubernetes_asyncio import client, config

        self._registry = registry
        registry.sync(self.static)
        configuration = client.Configuration()
        try:
            if self.settings.kubeconfig is not None:
                await config.load_kube_config(
                    config_file=self.settings.kubeconfig, client_configuration=configuration
                )
            else:
                # The library leaves this loader unannotated; it reads the service account's token and CA.
                config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        except (config.ConfigException, OSError) as exc:
            where = (
                f"kubeconfig {self.settings.kubeconfig}"
                if self.settings.kubeconfig is not None
                else "in-cluster service account (not running in a pod?)"
            )
            raise ConfigError(
                f"cannot talk to the Kubernetes API with the {where}: {exc}; give a readable kubeconfig "
                "with --kubeconfig FILE (or mmgate.kubernetes.kubeconfig)",
                path="mmgate.kubernetes",
            ) from None
        self._api = client.ApiClient(configuration)
        if self.settings.pool is not None:
            self._tasks.append(asyncio.create_task(self._follow_pool(), name="mmgate-k8s-pool"))
        if self._objectives is not None:
            follow = self._follow_objectives(self._objectives)
            self._tasks.append(asyncio.create_task(follow, name="mmgate-k8s-objectives"))
        self._tasks.append(asyncio.create_task(self._follow_pods(), name="mmgate-k8s-pods"))

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks.clear()
        if self._api is not None:
            await self._api.close()
            self._api = None

    # -- the pool -------------------------------------------------------------------------------

    async def _follow_pool(self) -> None:
        name = self.settings.pool
        ns = self.settings.namespace

        def listed(items: list[Any]) -> None:
            if items:
                self._apply_pool(items[0])
            else:
                log.warning("InferencePool %s/%s not found; watching for it", ns, name)

        def changed(kind: str, obj: Any) -> None:
            if kind in ("ADDED", "MODIFIED"):
                self._apply_pool(obj)
            elif kind == "DELETED":
                log.warning("InferencePool %s/%s was deleted; keeping its last endpoints", ns, name)

        await self._follow_custom(
            f"InferencePool {ns}/{name}",
            (POOL_GROUP, POOL_VERSION, POOL_PLURAL),
            listed,
            changed,
            field_selector=f"metadata.name={name}",
        )

    async def _follow_custom(
        self,
        what: str,
        resource: tuple[str, str, str],
        listed: Callable[[list[Any]], None],
        changed: Callable[[str, Any], None],
        *,
        field_selector: str = "",
    ) -> None:
        """List then watch custom objects of the namespace (``resource``: group, version,
        plural), again after each watch ends, after ``410 Gone`` and after a failure. A 403 or
        404 (no RBAC rule, no such resource type installed) will not mend in a second: it is
        logged once and asked again less and less often, up to every :data:`RETRY_MAX_S`."""
        from kubernetes_asyncio import client, watch
        from kubernetes_asyncio.client.exceptions import ApiException

        api = client.CustomObjectsApi(self._api)
        group, version, plural = resource
        args = (group, version, self.settings.namespace, plural)
        pause = RETRY_S
        refused: int | None = None  # the status of the refusal last logged
        while True:
            try:
                listing = await api.list_namespaced_custom_object(*args, field_selector=field_selector)
                pause, refused = RETRY_S, None
                items = listing.get("items") if isinstance(listing, dict) else None
                listed(items if isinstance(items, list) else [])
                version_seen = (listing.get("metadata") or {}).get("resourceVersion")
                w = watch.Watch()
                async with w:
                    async for event in w.stream(
                        api.list_namespaced_custom_object,
                        *args,
                        field_selector=field_selector,
                        resource_version=version_seen,
                        allow_watch_bookmarks=True,
                        timeout_seconds=WATCH_TIMEOUT_S,
                    ):
                        changed(str(event.get("type")), event.get("raw_object"))
            except asyncio.CancelledError:
                raise
            except ApiException as exc:
                if exc.status in (403, 404):
                    if exc.status != refused:
                        log.warning("%s: %s %s; asking again later", what, exc.status, exc.reason)
                        refused = exc.status
                    await asyncio.sleep(pause)
                    pause = min(pause * 2, RETRY_MAX_S)
                elif exc.status != 410:
                    log.warning("%s: %s %s; retrying", what, exc.status, exc.reason)
                    await asyncio.sleep(RETRY_S)
            except Exception as exc:  # the API server went away mid-stream: list again shortly
                log.warning("%s: watch broke (%s); retrying", what, type(exc).__name__)
                await asyncio.sleep(RETRY_S)

    # -- InferenceObjectives ---------------------------------------------------------------------

    def follow_objectives(self, listener: Listener) -> bool:
        """With discovery by InferencePool, watch the namespace's InferenceObjectives that refer
        to the pool once started; ``listener`` hears the set (name: priority) each time it
        changes. False (nothing to watch) with discovery by pod selector: no pool to refer to."""
        if self.settings.pool is None:
            return False
        self._objectives = ObjectiveSet(self.settings.pool, listener)
        return True

    async def _follow_objectives(self, objectives: ObjectiveSet) -> None:
        await self._follow_custom(
            f"InferenceObjectives in {self.settings.namespace}",
            (OBJECTIVE_GROUP, OBJECTIVE_VERSION, OBJECTIVE_PLURAL),
            objectives.listed,
            objectives.changed,
        )

    def _apply_pool(self, pool: Mapping[str, Any]) -> None:
        try:
            target = pool_target(pool)
        except ValueError as exc:
            log.warning("InferencePool %s not applied: %s", self.settings.pool, exc)
            return
        if target != self._target:
            log.info("InferencePool %s: pods %s, ports %s", self.settings.pool, target.selector, target.ports)
            self._target = target
            self._retarget.set()

    # -- the pods -------------------------------------------------------------------------------

    async def _follow_pods(self) -> None:
        first = True
        while True:
            if self._target is None:  # the pool has not been read yet
                await self._retarget.wait()
            self._retarget.clear()
            target = self._target
            assert target is not None
            watcher = asyncio.create_task(self._list_and_watch(target, first))
            retarget = asyncio.create_task(self._retarget.wait())
            try:
                await asyncio.wait({watcher, retarget}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for task in (watcher, retarget):
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await task
            first = False

    async def _list_and_watch(self, target: PoolTarget, first: bool) -> None:
        from kubernetes_asyncio import client, watch
        from kubernetes_asyncio.client.exceptions import ApiException

        core = client.CoreV1Api(self._api)
        ns = self.settings.namespace
        while True:
            try:
                # Raw JSON (``_preload_content=False``): the same dicts the watch yields, no model objects.
                response: Any = await core.list_namespaced_pod(
                    ns, label_selector=target.selector, _preload_content=False
                )
                listing = await response.json()
                if not first:
                    self.relists += 1
                first = False
                self._pods = {
                    str(p["metadata"].get("uid") or p["metadata"]["name"]): p
                    for p in listing.get("items") or []
                }
                self._apply(target)
                version = (listing.get("metadata") or {}).get("resourceVersion")
                while True:  # watches end after WATCH_TIMEOUT_S; resume from the last version seen
                    w = watch.Watch()
                    async with w:
                        async for event in w.stream(
                            core.list_namespaced_pod,
                            ns,
                            label_selector=target.selector,
                            resource_version=version,
                            allow_watch_bookmarks=True,
                            timeout_seconds=WATCH_TIMEOUT_S,
                        ):
                            self._on_pod_event(event, target)
                    version = w.resource_version or version
            except asyncio.CancelledError:
                raise
            except ApiException as exc:
                if exc.status == 410:
                    log.info("pod watch in %s expired (410 Gone); listing again", ns)
                else:
                    log.warning("listing pods in %s: %s %s; retrying", ns, exc.status, exc.reason)
                    await asyncio.sleep(RETRY_S)
            except Exception as exc:  # connection refused or cut: keep the endpoints we know
                log.warning("pod watch in %s broke (%s); retrying", ns, type(exc).__name__)
                await asyncio.sleep(RETRY_S)

    def _on_pod_event(self, event: Mapping[str, Any], target: PoolTarget) -> None:
        kind = event["type"]
        if kind == "BOOKMARK":
            return
        pod = event["raw_object"]
        meta = pod.get("metadata") or {}
        uid = str(meta.get("uid") or meta.get("name"))
        if kind == "DELETED":
            self._pods.pop(uid, None)
        elif kind in ("ADDED", "MODIFIED"):
            self._pods[uid] = pod
        else:
            return
        self._apply(target)

    def _apply(self, target: PoolTarget) -> None:
        registry = self._registry
        assert registry is not None
        found: dict[str, Endpoint] = {e.name: e for e in self.static}
        for pod in self._pods.values():
            for endpoint in endpoints_of_pod(pod, target.ports, self.settings.role_label):
                found.setdefault(endpoint.name, endpoint)
        added, removed = registry.sync(found.values())
        if added or removed:
            log.info("kubernetes pods: added %s, removed %s", added, removed)
        self.synced.set()
