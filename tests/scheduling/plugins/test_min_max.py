"""llm-d's min-max normalisation where less is better."""

from __future__ import annotations

from mmgate.scheduling.plugins._min_max import lower_is_better


def test_lowest_scores_one_highest_zero() -> None:
    assert lower_is_better([3.0, 1.0, 2.0]) == [0.0, 1.0, 0.5]


def test_unknown_values_score_zero_and_do_not_set_the_range() -> None:
    assert lower_is_better([None, 4.0, 2.0, None]) == [0.0, 0.0, 1.0, 0.0]
    assert lower_is_better([None, None]) == [0.0, 0.0]


def test_equal_known_values_all_score_one() -> None:
    assert lower_is_better([2.0, 2.0]) == [1.0, 1.0]
    assert lower_is_better([None, 2.0, 2.0]) == [0.0, 1.0, 1.0]
    assert lower_is_better([]) == []
