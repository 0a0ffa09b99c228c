"""Documents in requests: Anthropic ``document`` blocks and OpenAI ``file`` / ``input_file`` parts
become document assets with their page count, read from the PDF's page tree (no PDF library)."""

from __future__ import annotations

import base64
import json

import orjson
import pytest

from mmgate.errors import RequestError
from mmgate.request import Api, Modality, parse_request
from mmgate.request.probe.document import page_count
from support.documents import pdf
from support.processes import mmgate_command, subprocess_env

REPORT = pdf(["Revenue grew by twelve percent.", "", "Appendix: tables"])
B64 = base64.b64encode(REPORT).decode()


def test_page_count_reads_the_page_tree() -> None:
    assert page_count(REPORT) == 3
    assert page_count(pdf(["one"])) == 1
    leaves_only = REPORT.replace(b"/Type /Pages", b"/Type /Kids!")  # no tree root: count the leaves
    assert page_count(leaves_only) == 3
    assert page_count(b"%PDF-1.7\n% object streams only, nothing visible\n") is None


def chat_with(part: dict[str, object]) -> bytes:
    return orjson.dumps({"model": "m", "messages": [{"role": "user", "content": [part]}]})


@pytest.mark.parametrize(
    ("part", "field"),
    [
        (
            {
                "type": "file",
                "file": {"file_data": "data:application/pdf;base64," + B64, "filename": "r.pdf"},
            },
            "messages[0].content[0].file.file_data",
        ),
        (
            {"type": "input_file", "file_data": "data:application/pdf;base64," + B64, "filename": "r.pdf"},
            "messages[0].content[0].file_data",
        ),
    ],
)
def test_openai_file_parts_are_documents_with_pages(part: dict[str, object], field: str) -> None:
    (asset,) = parse_request(chat_with(part), {}).assets
    assert (asset.modality, asset.detected_format, asset.pages, asset.field) == (
        Modality.DOCUMENT,
        "pdf",
        3,
        field,
    )
    assert asset.probed


def test_a_file_id_is_a_document_of_unknown_length() -> None:
    (asset,) = parse_request(chat_with({"type": "file", "file": {"file_id": "file-abc"}}), {}).assets
    assert asset.modality is Modality.DOCUMENT and asset.identity == "file-abc" and not asset.probed


def test_anthropic_document_blocks() -> None:
    body = orjson.dumps(
        {
            "model": "claude",
            "max_tokens": 8,
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "document",
                            "source": {"type": "base64", "media_type": "application/pdf", "data": B64},
                        },
                        {"type": "document", "source": {"type": "url", "url": "https://example.com/a.pdf"}},
                        {
                            "type": "document",
                            "source": {"type": "text", "media_type": "text/plain", "data": "plain\ntext"},
                        },
                        {"type": "text", "text": "Summarise."},
                    ],
                }
            ],
        }
    )
    view = parse_request(body, {}, api=Api.MESSAGES)
    inline, url = view.assets
    assert inline.pages == 3 and inline.field == "messages[0].content[0].source.data"
    assert url.pages is None and url.url == "https://example.com/a.pdf"
    assert "plain\ntext" in "".join(view.texts)  # a text source is prompt text


def test_bytes_that_are_no_pdf_in_a_document_are_refused() -> None:
    part = {
        "type": "file",
        "file": {"file_data": "data:application/pdf;base64," + base64.b64encode(b"not a pdf").decode()},
    }
    with pytest.raises(RequestError) as err:
        parse_request(chat_with(part), {})
    assert (
        err.value.param == "messages[0].content[0].file.file_data" and "not a PDF file" in err.value.message
    )


def test_inspect_shows_documents_with_their_pages(tmp_path: object) -> None:
    import subprocess
    from pathlib import Path

    path = Path(str(tmp_path)) / "req.json"
    path.write_bytes(chat_with({"type": "file", "file": {"file_data": "data:application/pdf;base64," + B64}}))
    out = subprocess.run(
        mmgate_command("inspect", "--json", str(path)),
        capture_output=True,
        text=True,
        env=subprocess_env(),
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    (asset,) = json.loads(out.stdout)["assets"]
    assert (asset["modality"], asset["pages"], asset["detected_format"]) == ("document", 3, "pdf")
    table = subprocess.run(
        mmgate_command("inspect", str(path)),
        capture_output=True,
        text=True,
        env=subprocess_env(COLUMNS="160"),
        timeout=60,
    )
    assert "document" in table.stdout and "3 pages" in table.stdout
