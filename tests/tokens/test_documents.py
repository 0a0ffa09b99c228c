"""PDFs priced by Claude's document rule: each page an image of fixed cost plus its text layer,
from the command line (pages and text read with pypdf) and in the pricing layer."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from mmgate.errors import RequestError
from mmgate.request import Api
from mmgate.request.view import MediaAsset, Modality, RequestView, Source
from mmgate.tokens import PricingConfig, price
from mmgate.tokens.documents import read_pdf
from mmgate.tokens.providers import ANTHROPIC_PAGE_TOKENS
from support.documents import pdf
from support.processes import mmgate_command, subprocess_env

TEXT = "Revenue grew by twelve percent in the third quarter."  # 52 bytes -> 13 text tokens


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        mmgate_command(*args), capture_output=True, text=True, env=subprocess_env(COLUMNS="160"), timeout=60
    )


def test_read_pdf_counts_pages_and_extracts_the_text_layer() -> None:
    doc = read_pdf(pdf([TEXT, "", "Appendix"]))
    assert doc.pages == 3
    assert TEXT in doc.text and "Appendix" in doc.text
    with pytest.raises(ValueError, match="not a PDF"):
        read_pdf(b"%PDF-1.4\nthis is not really a pdf", name="bad.pdf")


def test_tokens_prices_a_pdf_per_page_plus_its_text(tmp_path: Path) -> None:
    small, large = tmp_path / "letter.pdf", tmp_path / "poster.pdf"
    small.write_bytes(pdf([TEXT, ""]))
    large.write_bytes(pdf([TEXT, ""], size=(2384, 3370)))  # A0: the page image costs the same
    out = run("tokens", str(small), str(large), "--provider", "anthropic", "--json")
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)
    text_bytes = len(read_pdf(small.read_bytes()).text.encode())
    for row in rows:
        assert (row["modality"], row["pages"], row["text_bytes"]) == ("document", 2, text_bytes)
        assert row["tokens"] == 2 * ANTHROPIC_PAGE_TOKENS == 3200
        assert row["extra_tokens"] == -(-text_bytes // 4)
    table = run("tokens", str(small), "--provider", "anthropic")
    assert "2 pages" in table.stdout and "3,200" in table.stdout


def test_tokens_refuses_to_price_a_pdf_without_a_document_rule(tmp_path: Path) -> None:
    path = tmp_path / "report.pdf"
    path.write_bytes(pdf([TEXT]))
    out = run("tokens", str(path), "--family", "qwen3-vl")
    assert out.returncode == 2 and "--provider anthropic" in out.stderr and "Traceback" not in out.stderr


def test_cost_counts_a_document_into_the_shared_prefix(tmp_path: Path) -> None:
    path = tmp_path / "report.pdf"
    path.write_bytes(pdf([TEXT, "", ""]))
    out = run("cost", "--document", str(path), "--prefix-tokens", "100", "--json")
    assert out.returncode == 0, out.stderr
    text = -(-len(read_pdf(path.read_bytes()).text.encode()) // 4)
    assert json.loads(out.stdout)["workload"]["prefix_tokens"] == 100 + 3 * ANTHROPIC_PAGE_TOKENS + text


def document(pages: int | None, text_bytes: int | None = None) -> RequestView:
    asset = MediaAsset(Modality.DOCUMENT, Source.INLINE, "d" * 32, "messages[0].content[1].file.file_data")
    asset.pages, asset.text_bytes = pages, text_bytes
    return RequestView(api=Api.CHAT, model="m", parts=["x", asset])


def test_pricing_documents_by_provider_and_refusing_them_elsewhere() -> None:
    anthropic = PricingConfig(family=None, provider="anthropic")
    (a,) = price(document(4, 400), anthropic).assets
    assert (a.tokens, a.extra_tokens, a.pages, a.defaulted) == (4 * 1600, 100, 4, False)
    (unknown,) = price(document(None), anthropic).assets
    assert unknown.pages == 1 and unknown.defaulted
    with pytest.raises(RequestError) as err:
        price(document(2), PricingConfig(family="qwen3-vl", refuse_unserved=True))
    assert err.value.code == "unsupported_modality" and err.value.param.endswith("file.file_data")
    (lenient,) = price(document(2), PricingConfig(family="qwen3-vl")).assets  # validation off
    assert lenient.tokens == 2 * price(_image(), PricingConfig(family="qwen3-vl")).assets[0].total


def _image() -> RequestView:
    return RequestView(Api.CHAT, "m", ["x", MediaAsset(Modality.IMAGE, Source.URL, "u" * 32, "f")])
