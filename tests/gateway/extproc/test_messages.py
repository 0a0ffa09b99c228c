"""The request body handed back to Envoy: the same chunks whether the body is held whole or as
the pieces of a media-uuid splice."""

from __future__ import annotations

import pytest

from mmgate.gateway.extproc.messages import MAX_CHUNK, request_body
from mmgate.request import parse_request
from mmgate.request.limits import Limits
from mmgate.request.media_uuids import with_media_uuids
from mmgate.request.pieces import BodyPieces, joined
from mmgate.request.view import Api
from support.bodies import photo_chat


@pytest.mark.parametrize("images", [0, 1, 3])
def test_a_spliced_body_streams_to_envoy_in_the_chunks_of_its_joined_bytes(images: int) -> None:
    view = parse_request(photo_chat(images), {}, api=Api.CHAT, limits=Limits(own_media_uuids=True))
    body = with_media_uuids(view)
    whole = joined(body)
    assert isinstance(body, BodyPieces) == (images > 0)
    streamed = [m.request_body.response.body_mutation.streamed_response for m in request_body(body, end=True)]
    cuts = range(0, len(whole), MAX_CHUNK)
    assert [s.body for s in streamed] == [whole[i : i + MAX_CHUNK] for i in cuts]
    assert [s.end_of_stream for s in streamed] == [i + MAX_CHUNK >= len(whole) for i in cuts]
    assert list(request_body(body, end=True)) == list(request_body(whole, end=True))


def test_an_empty_body_is_one_empty_chunk_and_a_middle_one_never_ends_the_stream() -> None:
    (only,) = request_body(b"", end=True)
    assert only.request_body.response.body_mutation.streamed_response.end_of_stream
    pieces = BodyPieces(b"x" * MAX_CHUNK, [(MAX_CHUNK, b"y")])
    assert not any(
        m.request_body.response.body_mutation.streamed_response.end_of_stream
        for m in request_body(pieces, end=False)
    )
