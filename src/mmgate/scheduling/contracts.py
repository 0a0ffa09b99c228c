"""The plugin contracts of the endpoint picker, mirroring llm-d's EPP extension points.

A plugin is one of: a :class:`Producer` (per-request data computed before any profile runs), a
:class:`Filter`, a :class:`Scorer`, a :class:`Picker` (the three steps of a profile), or a
:class:`ProfileHandler` (which profiles run, and how their results become one decision). The hooks
that follow a request after the decision (:mod:`mmgate.scheduling.lifecycle`) are mixed into these.
This module holds the contracts only; :mod:`mmgate.scheduling.profile` and
:mod:`mmgate.scheduling.scheduler` run them.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any, ClassVar, Generic, Protocol, TypeVar

import msgspec

from mmgate.datalayer.index.store import AffinityStore, IndexProvider, MemoryIndexes
from mmgate.scheduling.types import (
    DataKey,
    EndpointState,
    ProfileResult,
    SchedulingRequest,
    SchedulingResult,
)


class PluginTimer(Protocol):
    """Where a plugin's processing time goes: called once per plugin when the scheduler is built,
    it returns the function that takes each call's seconds (the gateway keeps a histogram per
    plugin, as GIE's EPP does; the discrete-event benchmark passes none)."""

    def __call__(self, extension_point: str, plugin: Plugin[Any]) -> Callable[[float], None]: ...


class NoParams(msgspec.Struct, forbid_unknown_fields=True):
    """For plugins that take no parameters."""


ParamsT = TypeVar("ParamsT", bound=msgspec.Struct)


class PluginHandle:
    """What a plugin may use at construction: the shared RNG, other plugins by name, the
    gateway-wide defaults from the ``mmgate:`` section (``pricing_family``: ``mmgate.pricing.family``,
    the family ``token-producer`` prices with when its own parameters name none;
    ``refuse_unserved_modalities``: ``mmgate.validation.modalities``, whether a modality the served
    family cannot take is a 400), and where affinity indexes come from (``indexes``: in memory
    unless ``mmgate.sharedIndex`` makes them shared; reads never wait on I/O)."""

    def __init__(
        self,
        rng: random.Random,
        *,
        pricing_family: str | None = None,
        refuse_unserved_modalities: bool = True,
        indexes: IndexProvider | None = None,
        kv_blocks: AffinityStore[Any] | None = None,
    ) -> None:
        self.rng = rng
        self.pricing_family = pricing_family
        self.refuse_unserved_modalities = refuse_unserved_modalities
        self.indexes: IndexProvider = indexes if indexes is not None else MemoryIndexes()
        self.kv_blocks = kv_blocks  # the pods' KV-event block index (None: not subscribed)
        self.plugins: dict[str, Plugin[Any]] = {}

    def plugin(self, name: str) -> Plugin[Any] | None:
        return self.plugins.get(name)


class Plugin(Generic[ParamsT]):
    """Base of every plugin, generic over its parameters struct.

    A plugin class names its llm-d type in ``type_name`` (deprecated spellings in ``aliases``) and
    its parameters as the type argument, ``class TokenLoadScorer(Scorer[TokenLoadParams])``.
    ``Params`` (the struct the registry decodes a config's ``parameters`` into) is taken from that
    argument, so what is decoded and what mypy sees as ``self.params`` cannot drift apart.
    """

    type_name: ClassVar[str] = ""
    aliases: ClassVar[tuple[str, ...]] = ()
    Params: ClassVar[type[msgspec.Struct]] = NoParams

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for base in cls.__dict__.get("__orig_bases__", ()):
            for arg in getattr(base, "__args__", ()):
                if isinstance(arg, type) and issubclass(arg, msgspec.Struct):
                    cls.Params = arg

    def __init__(self, name: str, params: ParamsT, handle: PluginHandle) -> None:
        self.name = name
        self.params: ParamsT = params
        self.handle = handle

    def produces(self) -> tuple[DataKey[Any], ...]:
        return ()

    def consumes(self) -> tuple[DataKey[Any], ...]:
        """Data this plugin needs; a default producer is created if none is configured."""
        return ()

    def consumes_optional(self) -> tuple[DataKey[Any], ...]:
        """Data used when present: orders producers but never creates one."""
        return ()

    def resolve(self, plugins: Mapping[str, Plugin[Any]]) -> None:
        """Called once every configured plugin exists, to look up the ones this plugin names
        (raise ``ValueError`` naming the parameter when one is missing or of the wrong kind)."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"


class Producer(Plugin[ParamsT]):
    """Computes per-request data (llm-d DataProducer) before any profile runs."""

    def own_keys(self, key: DataKey[Any]) -> tuple[DataKey[Any], ...]:
        """``key``, plus its name-scoped twin when the instance is named other than its type."""
        return (key,) if self.name == self.type_name else (key, key.scoped(self.name))

    def produce(self, request: SchedulingRequest, endpoints: Sequence[EndpointState]) -> None:
        raise NotImplementedError


class Filter(Plugin[ParamsT]):
    def filter(self, request: SchedulingRequest, endpoints: list[EndpointState]) -> list[EndpointState]:
        raise NotImplementedError


class Scorer(Plugin[ParamsT]):
    """Returns one score per endpoint, aligned with ``endpoints``; the framework clamps to [0, 1]."""

    def score(self, request: SchedulingRequest, endpoints: list[EndpointState]) -> list[float]:
        raise NotImplementedError


class Picker(Plugin[ParamsT]):
    """Chooses targets (best first) among scored candidates."""

    def pick(self, endpoints: list[EndpointState], scores: list[float]) -> list[EndpointState]:
        raise NotImplementedError


class ProfileHandler(Plugin[ParamsT]):
    def stage_profiles(self) -> Mapping[str, str]:
        """Profiles that pick a pod for a stage other than the primary one, by stage name
        (``encode``, ``prefill``): the build gives each a default routing-header handler."""
        return {}

    def runs_one_profile(self) -> bool:
        """True when the handler runs the only profile once and makes it the primary one: the
        scheduler then skips the pick/process protocol, which would give the same result."""
        return False

    def pick_profiles(
        self,
        request: SchedulingRequest,
        profiles: Collection[str],
        results: Mapping[str, ProfileResult | None],
    ) -> list[str]:
        """Profiles to run next, among the configured ``profiles`` (by name); an empty list ends
        the cycle."""
        raise NotImplementedError

    def process_results(
        self, request: SchedulingRequest, results: dict[str, ProfileResult | None]
    ) -> SchedulingResult:
        raise NotImplementedError


class EndpointAware:
    """Mixed into a plugin that keeps per-endpoint state that must go when the endpoint goes."""

    def remove_endpoint(self, name: str) -> None:
        raise NotImplementedError
