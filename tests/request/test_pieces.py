"""A body held as pieces: its length, its pieces in order, and the same bytes however it is read."""

from __future__ import annotations

import os

import pytest

from mmgate.request.pieces import BodyPieces, chunks, joined

ORIGINAL = os.urandom(10_000)
A, B = b',"uuid":"a"', b',"uuid":"b"'
REFERENCE = ORIGINAL[:3_000] + A + ORIGINAL[3_000:7_001] + B + ORIGINAL[7_001:]


def test_length_pieces_and_join_agree_with_the_concatenation() -> None:
    body = BodyPieces(ORIGINAL, [(3_000, A), (7_001, B)])
    assert len(body) == len(REFERENCE) == len(ORIGINAL) + 22
    assert [bytes(p) for p in body] == [ORIGINAL[:3_000], A, ORIGINAL[3_000:7_001], B, ORIGINAL[7_001:]]
    assert all(p.obj is ORIGINAL for p in body if isinstance(p, memoryview))  # slices, not copies
    assert body.join() == REFERENCE and joined(body) == REFERENCE
    assert list(body) == list(body)  # iterable again: a retry sends the same pieces


def test_insertions_at_the_ends_and_empty_ones_leave_no_empty_piece() -> None:
    body = BodyPieces(b"{}", [(0, b"<"), (1, b""), (1, b"|"), (2, b">")])
    assert [bytes(p) for p in body] == [b"<", b"{", b"|", b"}", b">"] and len(body) == 5
    assert body.join() == b"<{|}>"


@pytest.mark.parametrize("inserts", [[(5, b"x"), (4, b"y")], [(-1, b"x")], [(7, b"x")]])
def test_offsets_must_ascend_within_the_body(inserts: list[tuple[int, bytes]]) -> None:
    with pytest.raises(ValueError):
        BodyPieces(b"abcdef", inserts)


def test_joined_returns_a_bytes_body_itself() -> None:
    raw = b'{"model":"m"}'
    assert joined(raw) is raw


@pytest.mark.parametrize("size", [1, 7, 3_000, 3_011, 4_096, 10_021, 10_022, 50_000])
def test_chunks_cut_the_pieces_where_a_contiguous_body_would_be_cut(size: int) -> None:
    body = BodyPieces(ORIGINAL, [(3_000, A), (7_001, B)])
    expected = [REFERENCE[i : i + size] for i in range(0, len(REFERENCE), size)]
    assert list(chunks(body, size)) == expected
    assert list(chunks(REFERENCE, size)) == expected
    assert all(type(c) is bytes for c in chunks(body, size))


def test_chunks_of_empty_bodies_and_bad_sizes() -> None:
    assert list(chunks(b"", 10)) == [] and list(chunks(BodyPieces(b"", [(0, b"")]), 10)) == []
    with pytest.raises(ValueError):
        list(chunks(b"abc", 0))
