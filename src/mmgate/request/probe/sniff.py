"""Which format a payload is, from its first bytes (never from the declared mime type)."""

from __future__ import annotations

_HEIF_BRANDS = frozenset({b"heic", b"heix", b"heim", b"heis", b"hevc", b"hevx", b"mif1", b"msf1"})
_AVIF_BRANDS = frozenset({b"avif", b"avis"})
_QT_ATOMS = frozenset({b"moov", b"mdat", b"wide", b"free", b"skip", b"pnot"})
_BMP_DIB_SIZES = frozenset({12, 16, 40, 52, 56, 64, 108, 124})

HEAD_BYTES = 64  # enough for every signature below, including ftyp compatible brands

IMAGE_FORMATS = frozenset({"png", "jpeg", "gif", "webp", "bmp", "tiff", "avif", "heic"})
VIDEO_FORMATS = frozenset({"mp4", "mov", "webm"})
AUDIO_FORMATS = frozenset({"wav", "mp3", "flac", "ogg"})
DOCUMENT_FORMATS = frozenset({"pdf"})


def sniff(head: bytes) -> str | None:
    """The container/codec family of a payload whose first bytes are ``head``, or ``None``."""
    if head.startswith(b"\x89PNG\r\n\x1a\n"):
        return "png"
    if head.startswith(b"%PDF-"):  # ISO 32000-1 7.5.2: the header is the file's first line
        return "pdf"
    if head.startswith(b"\xff\xd8\xff"):
        return "jpeg"
    if head[:6] in (b"GIF87a", b"GIF89a"):
        return "gif"
    if head.startswith(b"RIFF"):
        return {b"WEBP": "webp", b"WAVE": "wav"}.get(head[8:12])
    if head[:4] in (b"II*\x00", b"MM\x00*"):
        return "tiff"
    if head[4:8] == b"ftyp":
        return _isobmff_kind(head)
    if head[4:8] in _QT_ATOMS:
        return "mov"
    if head.startswith(b"\x1a\x45\xdf\xa3"):
        return "webm"  # any EBML/Matroska; the prober reads the DocType
    if head.startswith(b"fLaC"):
        return "flac"
    if head.startswith(b"OggS"):
        return "ogg"
    if head.startswith(b"ID3") or _mpeg_audio_sync(head):
        return "mp3"
    if head.startswith(b"BM") and len(head) >= 18 and int.from_bytes(head[14:18], "little") in _BMP_DIB_SIZES:
        return "bmp"
    return None


def _isobmff_kind(head: bytes) -> str:
    size = int.from_bytes(head[0:4], "big")
    brands = [head[8:12]]
    end = min(max(size, 16), len(head))
    brands += [head[i : i + 4] for i in range(16, end - 3, 4)]
    if any(b in _AVIF_BRANDS for b in brands):
        return "avif"
    if any(b in _HEIF_BRANDS for b in brands):
        return "heic"
    return "mov" if head[8:12] == b"qt  " else "mp4"


def _mpeg_audio_sync(head: bytes) -> bool:
    """An MPEG audio frame header: 11 sync bits, a valid version and a non-reserved layer."""
    if len(head) < 4 or head[0] != 0xFF or head[1] & 0xE0 != 0xE0:
        return False
    version, layer = (head[1] >> 3) & 3, (head[1] >> 1) & 3
    bitrate, rate = head[2] >> 4, (head[2] >> 2) & 3
    return version != 1 and layer != 0 and bitrate != 15 and rate != 3
