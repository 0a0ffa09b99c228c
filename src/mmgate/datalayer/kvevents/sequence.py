"""Sequence numbers of one publisher, and what a new one means.

vLLM numbers every batch a publisher sends from 0 (8-byte big-endian). A subscriber that sees
``expected`` is up to date; a higher number means batches were lost (the PUB or SUB queue
overflowed, or the subscriber joined late): the index may now hold blocks the pod evicted, or miss
blocks it stored. A lower number, outside the range a replay just delivered, means the publisher
started over: the pod restarted with an empty cache. A number further ahead than ``max_gap`` is not
a plausible loss (a pod publishes one batch per engine step; a subscriber cut off that long has
seen the link drop): it is a publisher that counts from elsewhere, or a forged sequence number,
and is treated as a restart (a JUMP, counted apart, so the lost-batches counter stays a count of
batches actually lost).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class Verdict(Enum):
    FIRST = "first"  # the first batch seen from this publisher
    NEXT = "next"  # the expected one
    GAP = "gap"  # batches between expected and this one are missing
    DUPLICATE = "duplicate"  # already applied (delivered by a replay, then live)
    RESTART = "restart"  # the publisher counts from the start again
    JUMP = "jump"  # further ahead than any plausible loss: a reset, not a gap


@dataclass(slots=True)
class SequenceTracker:
    expected: int | None = None
    replayed: tuple[int, int] | None = None  # live batches in this range came by replay already

    def classify(self, seq: int, max_gap: int | None = None) -> Verdict:
        expected = self.expected
        if expected is None:
            return Verdict.FIRST
        if seq == expected:
            return Verdict.NEXT
        if seq > expected:
            return Verdict.JUMP if max_gap is not None and seq - expected > max_gap else Verdict.GAP
        if self.replayed is not None and self.replayed[0] <= seq <= self.replayed[1]:
            return Verdict.DUPLICATE
        return Verdict.RESTART

    def missing(self, seq: int) -> int:
        """How many batches a GAP lost."""
        return 0 if self.expected is None else max(0, seq - self.expected)

    def applied(self, seq: int) -> None:
        self.expected = seq + 1

    def mark_replayed(self, start: int, last: int) -> None:
        """A replay delivered ``start..last``: live copies of those are duplicates."""
        self.replayed = (start, last)
        self.expected = last + 1
