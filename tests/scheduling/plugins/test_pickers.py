"""Pickers: max score, uniform random, score-proportional random, round robin."""

from __future__ import annotations

import random
from collections import Counter

from mmgate.scheduling import PluginHandle
from mmgate.scheduling.plugins.max_score_picker import MaxScorePicker
from mmgate.scheduling.plugins.random_picker import RandomPicker
from mmgate.scheduling.plugins.round_robin_picker import RoundRobinPicker
from mmgate.scheduling.plugins.weighted_random_picker import WeightedRandomPicker
from support.scheduling import endpoints

PickerParams = MaxScorePicker.Params  # llm-d's maxNumOfEndpoints, shared by every picker

EPS = endpoints(4)


def handle(seed: int = 0) -> PluginHandle:
    return PluginHandle(random.Random(seed))


def test_max_score_picks_the_best() -> None:
    p = MaxScorePicker("p", PickerParams(), handle())
    assert p.pick(EPS, [0.1, 0.9, 0.3, 0.2]) == [EPS[1]]


def test_max_score_k_best_in_order() -> None:
    p = MaxScorePicker("p", PickerParams(maxNumOfEndpoints=3), handle())
    assert p.pick(EPS, [0.1, 0.9, 0.3, 0.2]) == [EPS[1], EPS[2], EPS[3]]


def test_max_score_tie_break_covers_all_tied() -> None:
    p = MaxScorePicker("p", PickerParams(), handle(3))
    counts = Counter(p.pick(EPS, [0.5, 0.5, 0.1, 0.5])[0].name for _ in range(600))
    assert set(counts) == {EPS[0].name, EPS[1].name, EPS[3].name}
    assert min(counts.values()) > 150


def test_bad_max_num_falls_back_to_one() -> None:
    assert PickerParams(maxNumOfEndpoints=0).maxNumOfEndpoints == 1


def test_random_is_uniform_and_ignores_scores() -> None:
    p = RandomPicker("p", PickerParams(), handle(1))
    counts = Counter(p.pick(EPS, [1.0, 0.0, 0.0, 0.0])[0].name for _ in range(800))
    assert len(counts) == 4 and min(counts.values()) > 150


def test_weighted_random_follows_scores() -> None:
    p = WeightedRandomPicker("p", PickerParams(), handle(2))
    counts = Counter(p.pick(EPS, [3.0, 1.0, 0.0, 0.0])[0].name for _ in range(2000))
    assert counts[EPS[2].name] == counts[EPS[3].name] == 0
    assert 0.68 < counts[EPS[0].name] / 2000 < 0.82  # expected 0.75


def test_weighted_random_all_zero_is_uniform() -> None:
    p = WeightedRandomPicker("p", PickerParams(), handle(4))
    counts = Counter(p.pick(EPS, [0.0] * 4)[0].name for _ in range(400))
    assert len(counts) == 4


def test_round_robin_cycles() -> None:
    p = RoundRobinPicker("p", PickerParams(), handle())
    names = [p.pick(EPS, [0.0, 9.0, 0.0, 0.0])[0].name for _ in range(8)]
    assert names == [e.name for e in EPS] * 2


def test_max_score_draws_only_for_a_tie_with_the_best_so_far() -> None:
    rng = random.Random(5)
    p = MaxScorePicker("p", PickerParams(), PluginHandle(rng))
    state = rng.getstate()
    assert p.pick(EPS, [0.2, float("nan"), 0.7, 0.1]) == [EPS[2]]  # NaN is never the best...
    assert p.pick(EPS, [float("nan"), 0.9, 0.3, 0.2]) == [EPS[0]]  # ...unless it comes first
    assert rng.getstate() == state  # no tie: the tie-break drew nothing
    p.pick(EPS, [0.5, 0.5, 0.9, 0.1])  # a tie later beaten still draws
    assert rng.getstate() != state
