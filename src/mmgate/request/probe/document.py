"""PDF page counts without parsing the document: what the gateway's hot path can afford.

A PDF's pages hang off its page tree (ISO 32000-1 7.7.3): every intermediate node is a dictionary
with ``/Type /Pages`` and ``/Count`` (the number of leaf pages below it), every leaf has
``/Type /Page``. The root's ``/Count`` is therefore the largest ``/Count`` of any ``/Pages`` node.
Both are found by one regular-expression pass over the decoded bytes (C speed, no object graph,
no decompression). When the page tree sits inside compressed object streams (PDF 1.5 ``/ObjStm``)
neither is visible and the count is unknown: the asset stays unprobed and is priced by default.
``mmgate tokens`` reads the real structure with pypdf instead (:mod:`mmgate.tokens.documents`).
"""

from __future__ import annotations

import re

from mmgate.request.probe.reader import Reader
from mmgate.request.probe.result import ProbeResult

# /Count N next to /Type /Pages within one dictionary (either order, no nested dictionary between).
_PAGES_COUNT = re.compile(
    rb"/Type\s*/Pages(?![A-Za-z0-9])[^<>]*?/Count\s+(\d+)|/Count\s+(\d+)[^<>]*?/Type\s*/Pages(?![A-Za-z0-9])"
)
_PAGE = re.compile(rb"/Type\s*/Page(?![A-Za-z0-9])")
MAX_PAGES = 1_000_000  # a /Count beyond this is a lie, not a document


def page_count(data: bytes) -> int | None:
    """The number of pages the page tree declares, else the number of page objects, else None."""
    counts = [int(a or b) for a, b in _PAGES_COUNT.findall(data)]
    if counts:
        pages = max(counts)
        return pages if 0 < pages <= MAX_PAGES else None
    leaves = len(_PAGE.findall(data))
    return leaves or None


def pdf(reader: Reader) -> ProbeResult:
    return ProbeResult("pdf", pages=page_count(reader.read(0, reader.size)))
