"""Base64Reader decodes windows with SIMD base64 yet reads unvalidated text exactly as before."""

from __future__ import annotations

import base64
import binascii

import pytest

from mmgate.request.probe import Base64Reader, Truncated


def test_clean_text_reads_the_decoded_bytes_at_any_offset() -> None:
    data = bytes(range(256)) * 40
    reader = Base64Reader(base64.b64encode(data))
    for offset, n in ((0, 4), (700, 200), (767, 2), (5000, 5000), (len(data) - 3, 10)):
        assert reader.read(offset, n) == data[offset : offset + n]
    assert reader.decoded < len(data)  # only the windows asked for were decoded


def test_unvalidated_text_keeps_binascii_lenient_reading() -> None:
    # Padding in the middle (possible when validateBase64 is off): binascii stops at it.
    text = b"QQ==QUJD" + b"QUJD" * 10
    assert Base64Reader(text).read(0, 8) == binascii.a2b_base64(text[:768])[:8]
    with pytest.raises(Truncated):
        Base64Reader(b"QUJDR").read(0, 4)  # a dangling character: not base64 either way
