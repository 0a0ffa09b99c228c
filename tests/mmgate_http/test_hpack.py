"""HPACK decoding against RFC 7541's own examples (Appendix C), and its refusals."""

from __future__ import annotations

import pytest

from mmgate.http.hpack import Decoder, HpackError, encode, huffman_decode


def test_the_rfc_s_request_examples_with_huffman_coding_decode_with_their_dynamic_table() -> None:
    # RFC 7541 C.4.1-C.4.3: three requests on one connection, each indexing into the last's table.
    decoder = Decoder()
    first = decoder.decode(bytes.fromhex("828684418cf1e3c2e5f23a6ba0ab90f4ff"))
    assert first == [
        (b":method", b"GET"),
        (b":scheme", b"http"),
        (b":path", b"/"),
        (b":authority", b"www.example.com"),
    ]
    second = decoder.decode(bytes.fromhex("828684be5886a8eb10649cbf"))
    assert second == [*first, (b"cache-control", b"no-cache")]
    third = decoder.decode(bytes.fromhex("828785bf408825a849e95ba97d7f8925a849e95bb8e8b4bf"))
    assert third == [
        (b":method", b"GET"),
        (b":scheme", b"https"),
        (b":path", b"/index.html"),
        (b":authority", b"www.example.com"),
        (b"custom-key", b"custom-value"),
    ]


def test_a_block_that_only_reads_the_tables_decodes_the_same_when_repeated() -> None:
    decoder = Decoder()
    decoder.decode(bytes.fromhex("828684418cf1e3c2e5f23a6ba0ab90f4ff"))
    again = bytes.fromhex("828684be")  # everything indexed, the authority from the dynamic table
    assert (
        decoder.decode(again)
        == decoder.decode(again)
        == [
            (b":method", b"GET"),
            (b":scheme", b"http"),
            (b":path", b"/"),
            (b":authority", b"www.example.com"),
        ]
    )


def test_what_the_encoder_writes_decodes_to_the_same_headers() -> None:
    headers = [(b"grpc-status", b"0"), (b"grpc-message", b"x" * 300)]
    assert Decoder().decode(encode(headers)) == headers


@pytest.mark.parametrize(
    "block",
    [
        bytes.fromhex("80"),  # index 0
        bytes.fromhex("be"),  # index 62 with an empty dynamic table
        bytes.fromhex("3fe21f"),  # a table size update to 4097, above the advertised 4096
        bytes.fromhex("418cf1e3c2e5"),  # a string longer than the block
    ],
)
def test_malformed_blocks_are_refused(block: bytes) -> None:
    with pytest.raises(HpackError):
        Decoder().decode(block)


def test_huffman_padding_must_be_the_eos_prefix() -> None:
    assert huffman_decode(bytes.fromhex("f1e3c2e5f23a6ba0ab90f4ff")) == b"www.example.com"
    with pytest.raises(HpackError):
        huffman_decode(bytes.fromhex("f1e3c2e5f23a6ba0ab90f4fe"))  # padding with a zero bit
    with pytest.raises(HpackError):
        huffman_decode(bytes.fromhex("ffffffff"))  # 32 one-bits: an EOS code, then more
