"""The per-endpoint LRU + reverse index behind the affinity plugins."""

from __future__ import annotations

import random
from collections.abc import Iterator

from mmgate.datalayer.index.memory import ALL, AffinityIndex


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

    # ``more`` is the lazy part (the block chain after the hashes already known, ``keys``).
    assert idx.longest_prefix((), lazy([1, 2, 3, 4, 9, 10, 11])) == {"a": 3, "b": 4}
    assert read == [1, 2, 3, 4, 9]  # 9 is held by nobody: 10 and 11 cannot change the answer
    read.clear()
    assert idx.longest_prefix((), lazy([7, 1, 2])) == {}
    assert read == [7]
    assert idx.longest_prefix((), iter([])) == {}


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


def assert_lookups_walk_each_endpoint(
    idx: AffinityIndex[int], endpoints: list[str], keys: list[int], rng: random.Random
) -> None:
    """Every way of passing ``keys`` finds, per endpoint, what walking its own LRU finds."""
    expected = {}
    for ep in endpoints:
        n = 0
        while n < len(keys) and idx.holds(ep, keys[n]):
            n += 1
        if n:
            expected[ep] = n
    assert idx.longest_prefix(keys) == expected
    assert idx.longest_prefix((), iter(keys)) == expected
    cut = rng.randint(0, len(keys))  # known hashes in bulk, the rest lazily
    assert idx.longest_prefix(tuple(keys[:cut]), iter(keys[cut:])) == expected
    assert idx.longest_prefix(keys[:cut], keys[cut:]) == expected


def test_longest_prefix_agrees_with_walking_each_endpoint_on_random_indexes() -> None:
    """Endpoints drop out at different depths, some hold later keys but not the first ones."""
    rng = random.Random(7)
    endpoints = [f"pod-{i}" for i in range(6)]
    for _ in range(300):
        idx: AffinityIndex[int] = AffinityIndex()
        keys = list(range(rng.randint(1, 30)))
        for ep in endpoints:
            idx.add(ep, [k for k in keys if rng.random() < 0.92])
        assert_lookups_walk_each_endpoint(idx, endpoints, keys, rng)


def test_longest_prefix_reads_more_only_when_the_known_keys_all_match() -> None:
    idx: AffinityIndex[int] = AffinityIndex()
    idx.add("a", [1, 2, 3], capacity=10)
    idx.add("b", [1, 2, 3, 4], capacity=10)
    read: list[int] = []

    def lazy(keys: list[int]) -> Iterator[int]:
        for k in keys:
            read.append(k)
            yield k

    assert idx.longest_prefix([1, 2], lazy([3, 4, 5, 6])) == {"a": 3, "b": 4}
    assert read == [3, 4, 5]
    read.clear()
    assert idx.longest_prefix([1, 7], lazy([3])) == {"a": 1, "b": 1}  # 7: nobody, 3 is never read
    assert idx.longest_prefix([8], lazy([1])) == {}
    assert idx.longest_prefix((), lazy([1, 2, 9])) == {"a": 2, "b": 2}
    assert read == [1, 2, 9]


def test_shared_holder_sets_stay_exact_through_random_adds_evictions_and_removals() -> None:
    """Keys share holder-set objects (replaced, never mutated): every change must still leave each
    key's holders, and every lookup, equal to what each endpoint's own LRU says."""
    rng = random.Random(11)
    endpoints = [f"pod-{i}" for i in range(5)]
    idx: AffinityIndex[int] = AffinityIndex()
    for step in range(3000):
        ep = rng.choice(endpoints)
        op = rng.random()
        if op < 0.7:
            start = rng.randint(0, 40)
            idx.add(
                ep,
                range(start, start + rng.randint(1, 25)),
                capacity=rng.randint(10, 60),
                mask=rng.choice((1, 2)),
            )
        elif op < 0.9:
            idx.remove(ep, rng.sample(range(70), rng.randint(1, 20)), mask=rng.choice((1, 2, ALL)))
        elif op < 0.97:
            idx.clear(ep, mask=rng.choice((1, 2)))
        else:
            idx.remove_endpoint(ep)
        if step % 50:
            continue
        for key in range(70):
            held = {e for e in endpoints if idx.holds(e, key)}
            assert idx.holders(key) == (held or None)
        assert_lookups_walk_each_endpoint(idx, endpoints, list(range(rng.randint(0, 10), 70)), rng)
