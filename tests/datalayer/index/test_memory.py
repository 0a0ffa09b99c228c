"""The per-endpoint LRU + reverse index behind the affinity plugins."""

from __future__ import annotations

import random
from collections.abc import Iterator

from mmgate.datalayer.index.memory import AffinityIndex


def test_longest_prefix_counts_consecutive_keys_per_endpoint() -> None:
    idx: AffinityIndex[int] = AffinityIndex()
    idx.add("a", [1, 2, 3], capacity=10)
    idx.add("b", [1, 2], capacity=10)
    idx.add("c", [2, 3], capacity=10)  # holds later keys but not the first
    assert idx.longest_prefix([1, 2, 3, 4]) == {"a": 3, "b": 2}
    assert idx.longest_prefix([9, 1]) == {}


def test_longest_prefix_reads_keys_no_further_than_the_answer_needs() -> None:
    idx: AffinityIndex[int] = AffinityIndex()
    idx.add("a", [1, 2, 3], capacity=10)
    idx.add("b", [1, 2, 3, 4, 5], capacity=10)
    read: list[int] = []

    def lazy(keys: list[int]) -> Iterator[int]:
        for k in keys:
            read.append(k)
            yield k

    assert idx.longest_prefix(lazy([1, 2, 3, 4, 9, 10, 11])) == {"a": 3, "b": 4}
    assert read == [1, 2, 3, 4, 9]  # 9 is held by nobody: 10 and 11 cannot change the answer
    read.clear()
    assert idx.longest_prefix(lazy([7, 1, 2])) == {}
    assert read == [7]
    assert idx.longest_prefix(iter([])) == {}


def test_eviction_is_per_endpoint_and_keeps_the_reverse_index_exact() -> None:
    idx: AffinityIndex[str] = AffinityIndex()
    idx.add("a", ["x", "y"], capacity=2)
    idx.add("b", ["x"], capacity=2)
    idx.add("a", ["x"], capacity=2)  # refresh x: y is now the oldest on a
    idx.add("a", ["z"], capacity=2)
    assert idx.holds("a", "x") and idx.holds("a", "z") and not idx.holds("a", "y")
    assert idx.holders("y") is None
    assert idx.holders("x") == {"a", "b"}


def test_remove_endpoint_drops_all_its_keys() -> None:
    idx: AffinityIndex[int] = AffinityIndex()
    idx.add("a", range(5), capacity=100)
    idx.add("b", [0], capacity=100)
    idx.remove_endpoint("a")
    idx.remove_endpoint("missing")
    assert idx.held_keys() == [0] and idx.holders(0) == {"b"}
    assert idx.endpoints() == ["b"] and idx.size("a") == 0


def test_longest_prefix_agrees_with_walking_each_endpoint_on_random_indexes() -> None:
    """Endpoints drop out at different depths, some hold later keys but not the first ones."""
    rng = random.Random(7)
    endpoints = [f"pod-{i}" for i in range(6)]
    for _ in range(300):
        idx: AffinityIndex[int] = AffinityIndex()
        keys = list(range(rng.randint(1, 30)))
        for ep in endpoints:
            idx.add(ep, [k for k in keys if rng.random() < 0.92])
        expected = {}
        for ep in endpoints:
            n = 0
            while n < len(keys) and idx.holds(ep, keys[n]):
                n += 1
            if n:
                expected[ep] = n
        assert idx.longest_prefix(keys) == expected
        assert idx.longest_prefix(iter(keys)) == expected
