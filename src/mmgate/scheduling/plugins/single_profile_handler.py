"""``single-profile-handler``: run the one configured profile once; it is also the primary one."""

from __future__ import annotations

from collections.abc import Collection, Mapping

from mmgate.scheduling.contracts import NoParams, ProfileHandler
from mmgate.scheduling.profile import no_target
from mmgate.scheduling.types import ProfileResult, SchedulingRequest, SchedulingResult


class SingleProfileHandler(ProfileHandler[NoParams]):
    type_name = "single-profile-handler"

    def runs_one_profile(self) -> bool:
        cls = type(self)  # a subclass that changes the protocol goes through it
        return (
            cls.pick_profiles is SingleProfileHandler.pick_profiles
            and cls.process_results is SingleProfileHandler.process_results
        )

    def pick_profiles(
        self,
        request: SchedulingRequest,
        profiles: Collection[str],
        results: Mapping[str, ProfileResult | None],
    ) -> list[str]:
        if results or len(profiles) != 1:
            return []
        return list(profiles)

    def process_results(
        self, request: SchedulingRequest, results: dict[str, ProfileResult | None]
    ) -> SchedulingResult:
        (name,) = results
        result = results[name]
        if result is None or not result.targets:
            raise no_target(name)
        return SchedulingResult(profiles=results, primary_profile=name)
