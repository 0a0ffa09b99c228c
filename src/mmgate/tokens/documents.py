"""A PDF's pages and text layer, read from its structure with pypdf (``mmgate tokens``, ``cost``).

Hosted APIs price a PDF by its pages and the text extracted from them (docs/tokens.md
"Documents"). The gateway's hot path only counts pages (:mod:`mmgate.request.probe.document`);
the command line can afford the real parse: pypdf walks the cross-reference table and the page
tree (compressed object streams included) and extracts each page's text. Nothing is rendered.

pypdf (pure Python, no dependencies) is imported here only, on first use: the gateway never loads it.
"""

from __future__ import annotations

from dataclasses import dataclass
from io import BytesIO


@dataclass(frozen=True, slots=True)
class Document:
    pages: int
    text: str  # the text layer of every page, in order, joined by newlines

    @property
    def text_bytes(self) -> int:
        return len(self.text.encode())


def read_pdf(data: bytes, *, name: str = "<pdf>") -> Document:
    """Pages and text of a PDF; ``ValueError`` naming ``name`` for anything that is not one."""
    try:
        from pypdf import PdfReader
        from pypdf.errors import PyPdfError
    except ImportError:  # pragma: no cover - the extra is installed wherever tests run
        raise ValueError(f"{name}: reading PDFs needs pypdf: pip install 'mmgate[documents]'") from None
    try:
        reader = PdfReader(BytesIO(data))
        if reader.is_encrypted:
            raise ValueError(f"{name}: the PDF is encrypted; hosted APIs refuse encrypted PDFs too")
        texts = [page.extract_text() or "" for page in reader.pages]
    except (PyPdfError, KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"{name}: not a PDF pypdf can read ({exc})") from None
    return Document(len(texts), "\n".join(texts))
