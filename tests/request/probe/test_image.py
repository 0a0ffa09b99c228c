"""Image probing against real files written by Pillow (and a hand-built HEIC)."""

from __future__ import annotations

import base64
import io
import json

import pytest
from PIL import Image

from mmgate.request.probe import Base64Reader, BytesReader, probe, probe_bytes
from mmgate.request.probe import image as image_probe
from support.bodies import image
from support.media import DATA

CASES = [
    ("PNG", "png", {}),
    ("JPEG", "jpeg", {}),
    ("JPEG", "jpeg", {"progressive": True}),
    ("GIF", "gif", {}),
    ("WEBP", "webp", {}),  # lossy: VP8
    ("WEBP", "webp", {"lossless": True}),  # VP8L
    ("BMP", "bmp", {}),
    ("TIFF", "tiff", {}),
    ("TIFF", "tiff", {"compression": "tiff_lzw"}),
    ("AVIF", "avif", {}),
]


@pytest.mark.parametrize(("pil_format", "name", "options"), CASES)
@pytest.mark.parametrize(("width", "height"), [(1, 1), (321, 123), (1280, 720)])
def test_pillow_images_probe_to_the_written_size(
    pil_format: str, name: str, options: dict[str, object], width: int, height: int
) -> None:
    data = image(pil_format, width, height, **options)
    result = probe_bytes(data)
    assert result is not None
    assert (result.format, result.width, result.height) == (name, width, height)


def test_webp_with_alpha_uses_the_extended_header() -> None:
    img = Image.linear_gradient("L").resize((300, 200)).convert("RGBA")
    img.putalpha(Image.linear_gradient("L").resize((300, 200)))
    out = io.BytesIO()
    img.save(out, "WEBP", exif=b"Exif\x00\x00II*\x00\x08\x00\x00\x00\x00\x00")
    data = out.getvalue()
    assert data[12:16] == b"VP8X"
    result = probe_bytes(data)
    assert result is not None and (result.width, result.height) == (300, 200)


def test_avif_with_alpha_reports_the_primary_item_not_the_alpha_plane() -> None:
    data = image("AVIF", 320, 200, mode="RGBA")
    result = probe_bytes(data)
    assert result is not None and (result.format, result.width, result.height) == ("avif", 320, 200)


def test_top_down_bmp_reports_a_positive_height() -> None:
    data = bytearray(image("BMP", 40, 30))
    data[22:26] = (-30).to_bytes(4, "little", signed=True)
    result = probe_bytes(bytes(data))
    assert result is not None and (result.width, result.height) == (40, 30)


def test_big_endian_tiff() -> None:
    # Pillow writes little-endian TIFF; build a minimal big-endian one: one IFD, SHORT and LONG sizes.
    entries = [(256, 3, 1, 640 << 16), (257, 4, 1, 480)]
    ifd = len(entries).to_bytes(2, "big") + b"".join(
        t.to_bytes(2, "big") + k.to_bytes(2, "big") + n.to_bytes(4, "big") + v.to_bytes(4, "big")
        for t, k, n, v in entries
    )
    result = probe_bytes(b"MM\x00*" + (8).to_bytes(4, "big") + ifd + b"\x00" * 4)
    assert result is not None and (result.format, result.width, result.height) == ("tiff", 640, 480)


@pytest.mark.parametrize("name", ["photo.heic", "rotated.heic"])
def test_heic_primary_item_size_and_rotation(name: str) -> None:
    expected = json.loads((DATA / "expected.json").read_text())[name]
    result = probe_bytes((DATA / name).read_bytes())
    assert result is not None
    assert (result.format, result.width, result.height) == ("heic", expected["width"], expected["height"])


def _jpeg_with_big_metadata() -> bytes:
    img = Image.linear_gradient("L").resize((800, 600)).convert("RGB")
    exif = Image.Exif()
    exif[0x010E] = "x" * 60_000  # ImageDescription: a ~60 KB APP1 segment
    icc = b"\x00" * 200_000  # spread over four APP2 segments by Pillow
    out = io.BytesIO()
    img.save(out, "JPEG", exif=exif.tobytes(), icc_profile=icc, progressive=True)
    return out.getvalue()


def test_jpeg_frame_header_after_large_exif_and_icc() -> None:
    data = _jpeg_with_big_metadata()
    assert len(data) > 250_000
    result = probe_bytes(data)
    assert result is not None and (result.width, result.height) == (800, 600)


def test_base64_probing_decodes_only_the_segments_it_reads() -> None:
    data = _jpeg_with_big_metadata()
    reader = Base64Reader(base64.b64encode(data))
    assert reader.size == len(data)
    fmt, result = probe(reader)
    assert fmt == "jpeg" and result is not None and (result.width, result.height) == (800, 600)
    assert reader.decoded < 10_000  # hopped over ~260 KB of EXIF/ICC without decoding it


def test_jpeg_without_frame_header_is_unprobed() -> None:
    assert probe_bytes(b"\xff\xd8\xff\xda\x00\x02" + b"\x00" * 32) is None


def test_declared_label_does_not_matter_content_decides() -> None:
    png = image("PNG", 64, 48)
    fmt, result = probe(BytesReader(png))
    assert fmt == "png" and result is not None and result.width == 64


def test_jpeg_reader_gives_up_on_endless_segments() -> None:
    segments = b"\xff\xfe\x00\x02" * 5000  # empty COM segments, never a frame header
    with pytest.raises(image_probe.Truncated):
        image_probe.jpeg(BytesReader(b"\xff\xd8" + segments))
