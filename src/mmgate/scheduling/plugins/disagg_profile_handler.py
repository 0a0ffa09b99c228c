"""``disagg-profile-handler``: encode / prefill / decode as separate profiles (E/PD, P/D, E/P/D).

Decode-first, as llm-d: the ``decode`` profile runs; then, asked about that decode target, the
encode decider chooses whether the ``encode`` profile runs and the prefill decider whether the
``prefill`` profile runs. The decode profile is the primary one. Once the deciders have answered,
every plugin that prices the decode target on the assumption of a stage (a
:class:`StagesPlannedHook`: ``predicted-ttft-producer``) is told what was planned. The chosen encoders and
prefiller travel in llm-d's headers (``x-encoder-hosts-ports``, ``x-prefiller-host-port``), set by
the ``encoder-header-handler`` and ``prefill-header-handler`` plugins (created by default for the
encode and prefill profiles when the config lists none). ``stageOrder: prefill-first`` is not
offered.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any, Literal

import msgspec

from mmgate.scheduling.contracts import Plugin, PluginHandle, ProfileHandler
from mmgate.scheduling.keys import PREFIX_MATCH, TOKENIZED_PROMPT
from mmgate.scheduling.plugins._deciding import Decider, StagesPlannedHook
from mmgate.scheduling.profile import no_target
from mmgate.scheduling.types import DataKey, ProfileResult, SchedulingRequest, SchedulingResult


class ProfileNames(msgspec.Struct, forbid_unknown_fields=True):
    decode: str = "decode"
    prefill: str = "prefill"
    encode: str = "encode"


class DeciderNames(msgspec.Struct, forbid_unknown_fields=True):
    prefill: str = ""
    encode: str = ""


class DisaggParams(msgspec.Struct, forbid_unknown_fields=True):
    stageOrder: Literal["decode-first"] = "decode-first"
    profiles: ProfileNames = msgspec.field(default_factory=ProfileNames)
    deciders: DeciderNames = msgspec.field(default_factory=DeciderNames)


class DisaggProfileHandler(ProfileHandler[DisaggParams]):
    type_name = "disagg-profile-handler"

    def __init__(self, name: str, params: DisaggParams, handle: PluginHandle) -> None:
        super().__init__(name, params, handle)
        self._decode = params.profiles.decode
        # The stages a decider is named for, in the order they are planned: (profile, decider).
        self._stages: tuple[tuple[str, Decider[Any]], ...] = ()
        # The plugins told what was planned: found on first use, once the scheduler has made the
        # default producers too (they do not exist yet when resolve runs).
        self._hooks: tuple[StagesPlannedHook, ...] | None = None

    def consumes(self) -> tuple[DataKey[Any], ...]:
        return (TOKENIZED_PROMPT, PREFIX_MATCH)

    def resolve(self, plugins: Mapping[str, Plugin[Any]]) -> None:
        names = self.params.deciders
        profiles = self.params.profiles
        encode = _decider(plugins, names.encode, "deciders.encode")
        prefill = _decider(plugins, names.prefill, "deciders.prefill")
        self._stages = tuple(
            (profile, decider)
            for profile, decider in ((profiles.encode, encode), (profiles.prefill, prefill))
            if decider is not None
        )

    def stage_profiles(self) -> Mapping[str, str]:
        names: ProfileNames = self.params.profiles
        return {"encode": names.encode, "prefill": names.prefill}

    def pick_profiles(
        self,
        request: SchedulingRequest,
        profiles: Collection[str],
        results: Mapping[str, ProfileResult | None],
    ) -> list[str]:
        decode = self._decode
        if decode not in results:
            return [decode] if decode in profiles else []
        if len(results) > 1:  # the stages planned after decode have run: done
            return []
        ran = results[decode]
        plan: list[str] = []
        if ran is not None and ran.targets:
            target = ran.targets[0]
            for profile, decider in self._stages:
                if profile in profiles and decider.disaggregate(request, target):
                    plan.append(profile)
            hooks = self._hooks
            if hooks is None:
                found = self.handle.plugins.values()
                hooks = self._hooks = tuple(p for p in found if isinstance(p, StagesPlannedHook))
            for hook in hooks:
                hook.stages_planned(request, target)
        return plan

    def process_results(
        self, request: SchedulingRequest, results: dict[str, ProfileResult | None]
    ) -> SchedulingResult:
        decode = self._decode
        result = results.get(decode)
        if result is None or not result.targets:
            raise no_target(decode)
        return SchedulingResult(profiles=results, primary_profile=decode)


def _decider(plugins: Mapping[str, Plugin[Any]], name: str, param: str) -> Decider[Any] | None:
    if not name:
        return None
    found = plugins.get(name)
    if found is None:
        raise ValueError(f"{param}: no plugin named {name!r} is configured")
    if not isinstance(found, Decider):
        raise ValueError(f"{param}: {name!r} ({found.type_name}) is not a decider")
    return found
