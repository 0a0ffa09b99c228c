"""Audio/video probing against the shipped fixtures (written byte by byte by media.py)."""

from __future__ import annotations

import base64
import json
import zlib

import mutagen
import pytest

from mmgate.request.probe import Base64Reader, probe, probe_bytes
from support import media

EXPECTED: dict[str, dict[str, object]] = json.loads((media.DATA / "expected.json").read_text())
AV = sorted(n for n in EXPECTED if not n.endswith(".heic"))


def test_shipped_fixtures_match_their_generator() -> None:
    for name, (data, facts) in media.fixtures().items():
        assert zlib.crc32((media.DATA / name).read_bytes()) == EXPECTED[name]["crc32"] == zlib.crc32(data), (
            name
        )
        assert {k: v for k, v in EXPECTED[name].items() if k != "crc32"} == facts


@pytest.mark.parametrize("name", AV)
def test_probed_metadata_matches_what_was_written(name: str) -> None:
    facts = EXPECTED[name]
    result = probe_bytes((media.DATA / name).read_bytes())
    assert result is not None
    assert result.format == facts["format"]
    for key in ("width", "height", "fps", "sample_rate", "channels"):
        if key in facts:
            assert getattr(result, key) == facts[key], key
    if facts.get("duration_s") is None:
        assert result.duration_s is None
    else:
        assert result.duration_s == pytest.approx(facts["duration_s"], abs=1e-3)


@pytest.mark.parametrize("name", [n for n in AV if n.endswith((".mp3", ".flac", ".opus", ".wav"))])
def test_audio_fixtures_are_real_files_for_mutagen_too(name: str) -> None:
    parsed = mutagen.File(media.DATA / name)
    assert parsed is not None
    assert parsed.info.length == pytest.approx(EXPECTED[name]["duration_s"], abs=1e-3)


@pytest.mark.parametrize("name", AV)
def test_base64_probe_equals_bytes_probe(name: str) -> None:
    data = (media.DATA / name).read_bytes()
    reader = Base64Reader(base64.b64encode(data))
    assert probe(reader)[1] == probe_bytes(data)


def test_moov_after_a_large_mdat_is_found_without_decoding_the_media() -> None:
    data = (media.DATA / "moov_last.mp4").read_bytes()
    reader = Base64Reader(base64.b64encode(data))
    _, result = probe(reader)
    assert result is not None and result.width == 1280
    assert reader.decoded < len(data) // 4


def test_mp3_without_id3_and_with_vbr_length_from_size() -> None:
    result = probe_bytes(media.mp3(250, id3=False))
    assert result is not None and result.duration_s == pytest.approx(6.0, abs=1e-3)


def test_truncated_wav_reports_what_is_there() -> None:
    data = media.wav(2.0, 8000, 1)
    result = probe_bytes(data[: 44 + 8000])  # 8000 of 32000 data bytes: 0.5 s
    assert result is not None and result.duration_s == pytest.approx(0.5, abs=1e-3)


def test_fragmented_mp4_takes_its_length_from_mehd() -> None:
    result = probe_bytes(media.mp4(1920, 1080, 12.5, fragmented=True))
    assert result is not None
    assert (result.width, result.height, result.duration_s, result.fps) == (1920, 1080, 12.5, None)


def test_quicktime_without_ftyp_is_sniffed_as_mov() -> None:
    data = media.mp4(640, 480, 1.0, 24.0)
    moov = data[data.index(b"moov") - 4 :]  # drop ftyp: old QuickTime files start with moov
    result = probe_bytes(moov)
    assert result is not None and (result.format, result.width, result.fps) == ("mov", 640, 24.0)


def test_audio_only_mp4_reports_duration_rate_and_channels() -> None:
    result = probe_bytes(media.m4a(3.0, 44100, 2))
    assert result is not None
    assert (result.format, result.duration_s, result.sample_rate, result.channels) == ("mp4", 3.0, 44100, 2)
    assert result.width is None
