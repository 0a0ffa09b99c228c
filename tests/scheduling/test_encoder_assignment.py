"""Which encoder per media item: cache-affine first, then by load, with a stable tie-break."""

from __future__ import annotations

import pytest

from mmgate.scheduling.encoder_assignment import assign_encoders


def test_an_item_held_by_an_encoder_goes_there_and_cold_ones_spread_by_load() -> None:
    chosen = assign_encoders(["a", "b", "c", "d"], {"e1": 0.0, "e2": 0.0}, holders=[["e2"], [], [], []])
    assert list(chosen) == ["a", "b", "c", "d"]  # one entry per item, in the items' order
    assert chosen["a"] == "e2"
    assert sorted(chosen.values()) == ["e1", "e1", "e2", "e2"]  # the request's items side by side
    busy = assign_encoders(["x", "y"], {"e1": 5.0, "e2": 0.0})
    assert list(busy.values()) == ["e2", "e2"]  # 5 queued on e1: both fit on e2 before it is as busy


def test_an_item_held_by_several_encoders_goes_to_the_least_loaded_of_them() -> None:
    chosen = assign_encoders(
        ["a", "b"], {"e1": 0.0, "e2": 3.0, "e3": 1.0}, holders=[["e2", "e3", "gone"], ["gone"]]
    )
    assert chosen["a"] == "e3"  # e1 is idler but does not hold it
    assert chosen["b"] == "e1"  # its only holder left the pool: a cold item


def test_the_tie_break_is_stable_whatever_the_order_encoders_are_listed_in() -> None:
    idle = {"e1": 0.0, "e2": 0.0, "e3": 0.0}
    reordered = {"e3": 0.0, "e1": 0.0, "e2": 0.0}
    for identity in ("p", "q", "r", "s", "t"):
        one = assign_encoders([identity], idle)
        assert assign_encoders([identity], reordered) == one
    spread = {assign_encoders([f"item-{i}"], idle)[f"item-{i}"] for i in range(30)}
    assert spread == {"e1", "e2", "e3"}  # not all cold items on one encoder


def test_assigning_without_encoders_is_refused() -> None:
    with pytest.raises(ValueError):
        assign_encoders(["a"], {})
