"""InferenceObjectives from the Kubernetes API: the priorities flow control gives request names.

An ``InferenceObjective`` (``inference.networking.x-k8s.io/v1alpha2``, the resource GIE defined
and llm-d's router reads) names a priority for the requests that carry its name in
``x-gateway-inference-objective``. Its ``spec`` has ``priority`` (an integer; unset means 0) and
a required ``poolRef`` (``name``; ``group`` defaulting to ``inference.networking.k8s.io``,
``kind`` to ``InferencePool``): an objective applies to the pool it refers to, in its own
namespace. :class:`ObjectiveSet` keeps those of one pool, as the watch of
:class:`~mmgate.datalayer.kubernetes.KubernetesDiscovery` lists and changes them.

Every byte comes from the API server, so nothing is assumed of an object: one that refers to
another pool is simply not ours; one that refers to ours but cannot be read (no name, a priority
that is not a 32-bit integer, a ``poolRef`` of the wrong shape) is skipped and logged — the first
:data:`LOGGED` of them, then counted only — and an objective it replaces stops applying. At most
:data:`MAX_OBJECTIVES` are kept; more are skipped the same way.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

log = logging.getLogger("mmgate.datalayer")

GROUP = "inference.networking.x-k8s.io"
VERSION = "v1alpha2"
PLURAL = "inferenceobjectives"
POOL_REF_GROUP = "inference.networking.k8s.io"  # poolRef.group's default: the InferencePool's group
POOL_REF_KIND = "InferencePool"
MAX_OBJECTIVES = 1024
LOGGED = 20  # bad objects logged one by one; beyond, only counted (``skipped``)
MAX_NAME = 253  # a Kubernetes object name (DNS subdomain) is at most this long
_INT32 = (-(2**31), 2**31 - 1)

Listener = Callable[[Mapping[str, int]], None]


def objective_of(obj: object, pool: str) -> tuple[str, int] | None:
    """``(name, priority)`` of an InferenceObjective referring to ``pool``; ``None`` when it
    refers to another pool. Raises ``ValueError`` naming the field when it cannot be read."""
    if not isinstance(obj, dict):
        raise ValueError("not an object")
    meta = obj.get("metadata")
    name = meta.get("name") if isinstance(meta, dict) else None
    if not isinstance(name, str) or not 0 < len(name) <= MAX_NAME:
        raise ValueError("metadata.name is not an object name")
    spec = obj.get("spec")
    ref = spec.get("poolRef") if isinstance(spec, dict) else None
    if not isinstance(ref, dict):
        raise ValueError(f"{name}: spec.poolRef is missing")
    group, kind, target = ref.get("group"), ref.get("kind"), ref.get("name")
    if not isinstance(target, str) or not isinstance(group, str | None) or not isinstance(kind, str | None):
        raise ValueError(f"{name}: spec.poolRef is not a reference (name, group, kind strings)")
    if (
        target != pool
        or (group or POOL_REF_GROUP) != POOL_REF_GROUP
        or (kind or POOL_REF_KIND) != POOL_REF_KIND
    ):
        return None
    assert isinstance(spec, dict)
    priority = spec.get("priority")
    if priority is None:
        return name, 0  # GIE: an unset priority is 0
    if not isinstance(priority, int) or isinstance(priority, bool) or not _INT32[0] <= priority <= _INT32[1]:
        raise ValueError(f"{name}: spec.priority is not a 32-bit integer")
    return name, priority


def _name_of(obj: object) -> str | None:
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    name = meta.get("name") if isinstance(meta, dict) else None
    return name if isinstance(name, str) else None


class ObjectiveSet:
    """The objectives of one pool, kept from a list and the watch events after it; the listener
    hears the whole set each time it changes."""

    def __init__(self, pool: str, listener: Listener) -> None:
        self.pool = pool
        self._listener = listener
        self.priorities: dict[str, int] = {}
        self.skipped = 0  # unreadable objects, and those beyond MAX_OBJECTIVES

    def listed(self, items: Iterable[Any]) -> None:
        """A list: the set becomes what it holds."""
        found: dict[str, int] = {}
        for obj in items:
            read = self._read(obj)
            if read is not None:
                if read[0] not in found and len(found) >= MAX_OBJECTIVES:
                    self._skip(f"{read[0]}: more than {MAX_OBJECTIVES} InferenceObjectives")
                    continue
                found[read[0]] = read[1]
        self._set(found)

    def changed(self, kind: str, obj: Any) -> None:
        """A watch event (``ADDED``, ``MODIFIED``, ``DELETED``; others are ignored)."""
        if kind not in ("ADDED", "MODIFIED", "DELETED"):
            return
        found = dict(self.priorities)
        read = self._read(obj) if kind != "DELETED" else None
        if read is None:  # deleted, another pool's, or unreadable: it no longer applies
            name = _name_of(obj)
            if name is not None:
                found.pop(name, None)
        elif read[0] in found or len(found) < MAX_OBJECTIVES:
            found[read[0]] = read[1]
        else:
            self._skip(f"{read[0]}: more than {MAX_OBJECTIVES} InferenceObjectives")
        self._set(found)

    def _read(self, obj: Any) -> tuple[str, int] | None:
        try:
            return objective_of(obj, self.pool)
        except ValueError as exc:
            self._skip(str(exc))
            return None

    def _skip(self, why: str) -> None:
        self.skipped += 1
        if self.skipped <= LOGGED:
            log.warning("InferenceObjective skipped: %s", why)
            if self.skipped == LOGGED:
                log.warning("further unreadable InferenceObjectives are counted, not logged")

    def _set(self, found: dict[str, int]) -> None:
        if found != self.priorities:
            self.priorities = found
            log.info("pool %s: %d InferenceObjectives", self.pool, len(found))
            self._listener(dict(found))
