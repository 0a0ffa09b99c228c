"""Property tests: any bytes, random or truncated, give a result or "unprobed", nothing else."""

from __future__ import annotations

import base64
import os
from collections.abc import Callable

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mmgate.request.probe import (
    PROBERS,
    Base64Reader,
    BytesReader,
    ProbeResult,
    Reader,
    Truncated,
    probe,
)
from support.bodies import image as pillow_image
from support.media import DATA

SAMPLES = [
    pillow_image("PNG", 33, 17),
    pillow_image("JPEG", 33, 17, progressive=True),
    pillow_image("GIF", 33, 17),
    pillow_image("WEBP", 33, 17),
    pillow_image("BMP", 33, 17),
    pillow_image("TIFF", 33, 17),
    pillow_image("AVIF", 33, 17),
] + [p.read_bytes() for p in sorted(DATA.iterdir()) if p.suffix != ".json"]

# MMGATE_FUZZ_EXAMPLES=5000 for a longer local run; the suite stays fast by default.
_EXAMPLES = int(os.environ.get("MMGATE_FUZZ_EXAMPLES", "150"))
FUZZ = settings(max_examples=_EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _only_documented_outcomes(prober: Callable[[Reader], ProbeResult], reader: Reader) -> None:
    try:
        result = prober(reader)
    except Truncated:
        return
    assert isinstance(result, ProbeResult)


@FUZZ
@given(data=st.binary(max_size=2048))
def test_random_bytes_every_prober(data: bytes) -> None:
    for prober in PROBERS.values():
        _only_documented_outcomes(prober, BytesReader(data))
    _fmt, result = probe(BytesReader(data))
    assert result is None or isinstance(result, ProbeResult)


@FUZZ
@given(sample=st.sampled_from(SAMPLES), cut=st.integers(min_value=0, max_value=4096))
def test_truncated_real_files_every_prober(sample: bytes, cut: int) -> None:
    data = sample[: min(cut, len(sample))]
    for prober in PROBERS.values():
        _only_documented_outcomes(prober, BytesReader(data))
    probe(BytesReader(data))


@FUZZ
@given(
    sample=st.sampled_from(SAMPLES),
    flips=st.lists(st.tuples(st.integers(min_value=0, max_value=600), st.integers(0, 255)), max_size=8),
)
def test_corrupted_real_files_every_prober(sample: bytes, flips: list[tuple[int, int]]) -> None:
    data = bytearray(sample)
    for pos, value in flips:
        if pos < len(data):
            data[pos] = value
    for prober in PROBERS.values():
        _only_documented_outcomes(prober, BytesReader(bytes(data)))


@FUZZ
@given(sample=st.sampled_from(SAMPLES), text=st.binary(max_size=64), cut=st.integers(0, 2000))
def test_broken_base64_is_unprobed_not_an_exception(sample: bytes, text: bytes, cut: int) -> None:
    encoded = base64.b64encode(sample)
    broken = encoded[:cut] + text + encoded[cut:]
    _fmt, result = probe(Base64Reader(broken))
    assert result is None or isinstance(result, ProbeResult)


@FUZZ
@given(data=st.binary(max_size=3000), offset=st.integers(0, 3100), n=st.integers(0, 1200))
def test_lazy_base64_reads_equal_slices_of_the_full_decode(data: bytes, offset: int, n: int) -> None:
    reader = Base64Reader(base64.b64encode(data))
    assert reader.size == len(data)
    assert reader.read(offset, n) == data[offset : offset + n]
    assert reader.read(0, 16) == data[:16]  # after a cached window elsewhere
