"""Tiny, valid audio/video files written byte by byte (no ffmpeg on the build machines).

Each builder returns the file bytes for the parameters it is given, so tests can compare probed
metadata with what was written. ``python tests/support/media.py`` regenerates ``tests/request/data/``
(the shipped fixtures) and its ``expected.json``; a test checks that the shipped files still match.
"""

from __future__ import annotations

import io
import json
import struct
import sys
import wave
import zlib
from pathlib import Path

DATA = Path(__file__).resolve().parents[1] / "request" / "data"


# --- WAV ---------------------------------------------------------------------------------------


def wav(seconds: float = 1.5, rate: int = 16000, channels: int = 1) -> bytes:
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(channels)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(b"\x00\x00" * channels * int(seconds * rate))
    return out.getvalue()


# --- MP3: MPEG-1 Layer III frames of silence (all-zero side info and main data) ------------------


def mp3(frames: int = 125, id3: bool = True) -> bytes:
    """48 kHz mono 128 kbit/s CBR: 384-byte frames of 1152 samples, so 125 frames = 3.0 s."""
    header = bytes([0xFF, 0xFB, 0x94, 0xC0])  # MPEG-1, Layer III, no CRC, 128k, 48 kHz, mono
    frame = header + bytes(384 - 4)
    tag = b""
    if id3:  # an ID3v2.3 tag with one text frame, as most encoders write
        text = b"\x00mmgate test"
        body = b"TIT2" + struct.pack(">I", len(text)) + b"\x00\x00" + text
        size = len(body)
        syncsafe = bytes([(size >> 21) & 0x7F, (size >> 14) & 0x7F, (size >> 7) & 0x7F, size & 0x7F])
        tag = b"ID3\x03\x00\x00" + syncsafe + body
    return tag + frame * frames


# --- FLAC: STREAMINFO + frames of CONSTANT subframes -----------------------------------------


def _crc8(data: bytes) -> int:
    crc = 0
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = ((crc << 1) ^ 0x07) & 0xFF if crc & 0x80 else (crc << 1) & 0xFF
    return crc


def _crc16(data: bytes) -> int:
    crc = 0
    for byte in data:
        crc ^= byte << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x8005) & 0xFFFF if crc & 0x8000 else (crc << 1) & 0xFFFF
    return crc


def flac(frames: int = 8) -> bytes:
    """16 kHz mono 16-bit, 4096-sample frames: 8 frames = 2.048 s."""
    rate, block, total = 16000, 4096, 4096 * frames
    bits = (rate << 44) | (0 << 41) | (15 << 36) | total
    streaminfo = struct.pack(">HH", block, block) + b"\x00" * 6 + bits.to_bytes(8, "big") + b"\x00" * 16
    out = b"fLaC" + bytes([0x80]) + len(streaminfo).to_bytes(3, "big") + streaminfo
    for n in range(frames):
        head = bytes([0xFF, 0xF8, 0xC5, 0x08, n])  # 4096 samples, 16 kHz, mono, 16-bit, frame n
        head += bytes([_crc8(head)])
        frame = head + b"\x00" + b"\x00\x00"  # CONSTANT subframe, value 0
        out += frame + _crc16(frame).to_bytes(2, "big")
    return out


# --- Ogg Opus ----------------------------------------------------------------------------------


def _ogg_crc(data: bytes) -> int:
    crc = 0
    for byte in data:
        crc ^= byte << 24
        for _ in range(8):
            crc = ((crc << 1) ^ 0x04C11DB7) & 0xFFFFFFFF if crc & 0x80000000 else (crc << 1) & 0xFFFFFFFF
    return crc


def _ogg_page(packets: list[bytes], granule: int, seq: int, flags: int) -> bytes:
    lacing = b""
    for p in packets:
        lacing += b"\xff" * (len(p) // 255) + bytes([len(p) % 255])
    head = b"OggS\x00" + bytes([flags]) + struct.pack("<qII", granule, 0x6D6D6761, seq)
    page = head + b"\x00\x00\x00\x00" + bytes([len(lacing)]) + lacing + b"".join(packets)
    return page[:22] + struct.pack("<I", _ogg_crc(page)) + page[26:]


def opus(packets: int = 125, channels: int = 1, pre_skip: int = 312) -> bytes:
    """20 ms silent CELT packets at 48 kHz: 125 packets = 2.5 s."""
    head = b"OpusHead" + struct.pack("<BBHIhB", 1, channels, pre_skip, 16000, 0, 0)
    vendor = b"mmgate"
    tags = b"OpusTags" + struct.pack("<I", len(vendor)) + vendor + struct.pack("<I", 0)
    silence = b"\xf8\xff\xfe"
    out = _ogg_page([head], 0, 0, 0x02) + _ogg_page([tags], 0, 1, 0)
    done, seq = 0, 2
    while done < packets:
        n = min(50, packets - done)
        done += n
        flags = 0x04 if done == packets else 0
        out += _ogg_page([silence] * n, pre_skip + done * 960, seq, flags)
        seq += 1
    return out


# --- MP4 / MOV ---------------------------------------------------------------------------------


def _box(kind: bytes, *children: bytes) -> bytes:
    body = b"".join(children)
    return struct.pack(">I", 8 + len(body)) + kind + body


def _full(kind: bytes, version: int, body: bytes) -> bytes:
    return _box(kind, bytes([version, 0, 0, 0]) + body)


def mp4(
    width: int = 320,
    height: int = 240,
    seconds: float = 2.0,
    fps: float = 25.0,
    *,
    moov_last: bool = False,
    version: int = 0,
    brand: bytes = b"isom",
    mdat_bytes: int = 64,
    fragmented: bool = False,
) -> bytes:
    """One AVC video track with a sample table (no real samples): moov first or last.

    ``fragmented`` writes what an fMP4 init segment has: zero durations and sample counts in the
    movie, the total length in ``mvex/mehd``.
    """
    movie_scale, track_scale = 1000, 12800
    samples = 0 if fragmented else round(seconds * fps)
    movie_dur = 0 if fragmented else round(seconds * movie_scale)
    track_dur = 0 if fragmented else round(seconds * track_scale)
    if version == 1:
        mvhd = _full(b"mvhd", 1, struct.pack(">QQIQ", 0, 0, movie_scale, movie_dur) + bytes(80))
        tkhd_head = struct.pack(">QQIIQ", 0, 0, 1, 0, movie_dur)
        mdhd = _full(b"mdhd", 1, struct.pack(">QQIQ", 0, 0, track_scale, track_dur) + bytes(4))
    else:
        mvhd = _full(b"mvhd", 0, struct.pack(">IIII", 0, 0, movie_scale, movie_dur) + bytes(80))
        tkhd_head = struct.pack(">IIIII", 0, 0, 1, 0, movie_dur)
        mdhd = _full(b"mdhd", 0, struct.pack(">IIII", 0, 0, track_scale, track_dur) + bytes(4))
    matrix = struct.pack(">9I", 0x10000, 0, 0, 0, 0x10000, 0, 0, 0, 0x40000000)
    tkhd = _full(
        b"tkhd",
        version,
        tkhd_head + bytes(8) + bytes(8) + matrix + struct.pack(">II", width << 16, height << 16),
    )
    hdlr = _full(b"hdlr", 0, b"\x00\x00\x00\x00vide" + bytes(12) + b"video\x00")
    avc1 = _box(b"avc1", bytes(6) + b"\x00\x01" + bytes(16) + struct.pack(">HH", width, height) + bytes(50))
    stsd = _full(b"stsd", 0, struct.pack(">I", 1) + avc1)
    stts = _full(b"stts", 0, struct.pack(">III", 1, samples, track_dur // max(samples, 1)))
    stsz = _full(b"stsz", 0, struct.pack(">II", 1, samples))
    stbl = _box(b"stbl", stsd, stts, stsz)
    mdia = _box(b"mdia", mdhd, hdlr, _box(b"minf", stbl))
    mvex = (
        _box(b"mvex", _full(b"mehd", 0, struct.pack(">I", round(seconds * movie_scale))))
        if fragmented
        else b""
    )
    moov = _box(b"moov", mvhd, mvex, _box(b"trak", tkhd, mdia))
    compatible = b"isomiso2avc1mp41" if brand != b"qt  " else b"qt  "
    ftyp = _box(b"ftyp", brand + struct.pack(">I", 512) + compatible)
    mdat = _box(b"mdat", bytes(mdat_bytes))
    return ftyp + (mdat + moov if moov_last else moov + mdat)


def m4a(seconds: float = 3.0, rate: int = 44100, channels: int = 2) -> bytes:
    """An audio-only MP4 (AAC sample entry, no samples): what ``audio/mp4`` payloads look like."""
    duration = round(seconds * rate)
    mvhd = _full(b"mvhd", 0, struct.pack(">IIII", 0, 0, rate, duration) + bytes(80))
    mdhd = _full(b"mdhd", 0, struct.pack(">IIII", 0, 0, rate, duration) + bytes(4))
    hdlr = _full(b"hdlr", 0, b"\x00\x00\x00\x00soun" + bytes(12) + b"sound\x00")
    entry = bytes(6) + b"\x00\x01" + bytes(8) + struct.pack(">HHHHI", channels, 16, 0, 0, rate << 16)
    stsd = _full(b"stsd", 0, struct.pack(">I", 1) + _box(b"mp4a", entry))
    stbl = _box(b"stbl", stsd, _full(b"stsz", 0, struct.pack(">II", 0, 0)))
    trak = _box(b"trak", _box(b"mdia", mdhd, hdlr, _box(b"minf", stbl)))
    ftyp = _box(b"ftyp", b"M4A " + struct.pack(">I", 0) + b"M4A isommp42")
    return ftyp + _box(b"moov", mvhd, trak) + _box(b"mdat", bytes(32))


# --- HEIC (no encoder here): ftyp + meta with pitm / iprp(ipco(ispe, irot), ipma) --------------


def heic(width: int = 4032, height: int = 3024, rotate_quarter: bool = False) -> bytes:
    ftyp = _box(b"ftyp", b"heic" + struct.pack(">I", 0) + b"mif1heic")
    hdlr = _full(b"hdlr", 0, b"\x00\x00\x00\x00pict" + bytes(12) + b"\x00")
    pitm = _full(b"pitm", 0, struct.pack(">H", 1))
    thumb = _full(b"ispe", 0, struct.pack(">II", 320, 240))  # a thumbnail item's size, not primary
    ispe = _full(b"ispe", 0, struct.pack(">II", width, height))
    props = [thumb, ispe] + ([_box(b"irot", b"\x01")] if rotate_quarter else [])
    ipco = _box(b"ipco", *props)
    primary = [2, 3] if rotate_quarter else [2]
    entries = struct.pack(">HB", 2, 1) + bytes([0x81]) + struct.pack(">HB", 1, len(primary))
    entries += bytes(0x80 | i for i in primary)
    ipma = _full(b"ipma", 0, struct.pack(">I", 2) + entries)
    meta = _full(b"meta", 0, hdlr + pitm + _box(b"iprp", ipco, ipma))
    return ftyp + meta + _box(b"mdat", bytes(16))


# --- WebM --------------------------------------------------------------------------------------


def _size(n: int) -> bytes:
    for length in range(1, 9):
        if n < (1 << (7 * length)) - 1:
            return (n | (1 << (7 * length))).to_bytes(length, "big")
    raise ValueError(n)


def _el(ident: int, body: bytes) -> bytes:
    return ident.to_bytes((ident.bit_length() + 7) // 8, "big") + _size(len(body)) + body


def _uint(ident: int, value: int) -> bytes:
    return _el(ident, value.to_bytes(max(1, (value.bit_length() + 7) // 8), "big"))


def webm(
    width: int = 320, height: int = 240, seconds: float | None = 2.5, fps: float = 25.0, *, live: bool = False
) -> bytes:
    """A VP8 track and one cluster; ``live`` writes an unknown-size Segment without Duration."""
    header = _el(
        0x1A45DFA3,
        _uint(0x4286, 1)
        + _uint(0x42F7, 1)
        + _uint(0x42F2, 4)
        + _uint(0x42F3, 8)
        + _el(0x4282, b"webm")
        + _uint(0x4287, 4)
        + _uint(0x4285, 2),
    )
    info = _uint(0x2AD7B1, 1_000_000) + _el(0x4D80, b"mmgate") + _el(0x5741, b"mmgate")
    if seconds is not None:
        info += _el(0x4489, struct.pack(">d", seconds * 1000.0))
    video = _uint(0xB0, width) + _uint(0xBA, height)
    entry = _uint(0xD7, 1) + _uint(0x73C5, 1) + _uint(0x83, 1) + _el(0x86, b"V_VP8")
    entry += _uint(0x23E383, round(1e9 / fps)) + _el(0xE0, video)
    cluster = _el(0x1F43B675, _uint(0xE7, 0) + _el(0xA3, b"\x81\x00\x00\x80" + bytes(8)))
    body = _el(0x1549A966, info) + _el(0x1654AE6B, _el(0xAE, entry)) + cluster
    if live:
        return header + bytes.fromhex("18538067") + b"\x01\xff\xff\xff\xff\xff\xff\xff" + body
    return header + _el(0x18538067, body)


# --- shipped fixtures --------------------------------------------------------------------------

FIXTURES: dict[str, tuple[bytes, dict[str, object]]] = {}


def fixtures() -> dict[str, tuple[bytes, dict[str, object]]]:
    """name -> (bytes, what was written), the set shipped under data/."""
    if not FIXTURES:
        FIXTURES.update(
            {
                "tone.wav": (
                    wav(1.5, 8000, 1),
                    {"format": "wav", "duration_s": 1.5, "sample_rate": 8000, "channels": 1},
                ),
                "stereo.wav": (
                    wav(0.25, 22050, 2),
                    {"format": "wav", "duration_s": 0.25, "sample_rate": 22050, "channels": 2},
                ),
                "silence.mp3": (
                    mp3(125),
                    {"format": "mp3", "duration_s": 3.0, "sample_rate": 48000, "channels": 1},
                ),
                "silence.flac": (
                    flac(8),
                    {"format": "flac", "duration_s": 2.048, "sample_rate": 16000, "channels": 1},
                ),
                "silence.opus": (
                    opus(125),
                    {"format": "opus", "duration_s": 2.5, "sample_rate": 48000, "channels": 1},
                ),
                "clip.mp4": (
                    mp4(320, 240, 2.0, 25.0),
                    {"format": "mp4", "width": 320, "height": 240, "duration_s": 2.0, "fps": 25.0},
                ),
                "moov_last.mp4": (
                    mp4(1280, 720, 4.0, 30.0, moov_last=True, version=1, mdat_bytes=40000),
                    {"format": "mp4", "width": 1280, "height": 720, "duration_s": 4.0, "fps": 30.0},
                ),
                "clip.mov": (
                    mp4(640, 480, 1.0, 24.0, brand=b"qt  "),
                    {"format": "mov", "width": 640, "height": 480, "duration_s": 1.0, "fps": 24.0},
                ),
                "clip.webm": (
                    webm(320, 240, 2.5, 25.0),
                    {"format": "webm", "width": 320, "height": 240, "duration_s": 2.5, "fps": 25.0},
                ),
                "live.webm": (
                    webm(640, 360, None, 30.0, live=True),
                    {"format": "webm", "width": 640, "height": 360, "duration_s": None, "fps": 30.0},
                ),
                "photo.heic": (heic(4032, 3024), {"format": "heic", "width": 4032, "height": 3024}),
                "rotated.heic": (
                    heic(4032, 3024, rotate_quarter=True),
                    {"format": "heic", "width": 3024, "height": 4032},
                ),
            }
        )
    return FIXTURES


def write_fixtures(folder: Path = DATA) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    expected = {}
    for name, (data, facts) in fixtures().items():
        (folder / name).write_bytes(data)
        expected[name] = facts | {"crc32": zlib.crc32(data)}
    (folder / "expected.json").write_text(json.dumps(expected, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    write_fixtures(Path(sys.argv[1]) if len(sys.argv) > 1 else DATA)
