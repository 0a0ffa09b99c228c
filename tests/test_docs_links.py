"""Every relative link in README.md and docs/ resolves.

The benchmark pages link the raw JSON and plots their figures come from, and the pages link each
other by heading; a renamed file or heading would otherwise leave a dead link that nothing notices.
Links are read as CommonMark inline links ``[text](target)`` / ``![alt](target)``; fenced code is
skipped (commands there are not links). Anchors are checked against the target page's headings,
slugged as GitHub renders them (lower case, punctuation dropped, spaces to hyphens, ``-1``, ``-2``
for repeats).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PAGES = sorted([REPO / "README.md", *(REPO / "docs").rglob("*.md")])

_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_FENCE = re.compile(r"^\s*(```|~~~)")
_HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$")
_INLINE_CODE = re.compile(r"`[^`]*`")


def _prose_lines(text: str) -> list[str]:
    """The page's lines outside fenced code blocks."""
    lines: list[str] = []
    fenced = False
    for line in text.splitlines():
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            lines.append(line)
    return lines


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: markup and punctuation dropped, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link keeps its text
    text = text.replace("`", "").strip().lower()
    text = "".join(ch for ch in text if ch.isalnum() or ch in " -_")
    return text.replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    anchors: set[str] = set()
    for line in _prose_lines(page.read_text(encoding="utf-8")):
        match = _HEADING.match(line)
        if match is None:
            continue
        slug = _slug(match.group(1))
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        anchors.add(slug if count == 0 else f"{slug}-{count}")
    return anchors


def _links(page: Path) -> list[str]:
    targets: list[str] = []
    for line in _prose_lines(page.read_text(encoding="utf-8")):
        targets.extend(_LINK.findall(_INLINE_CODE.sub("", line)))
    return targets


def _is_external(target: str) -> bool:
    return re.match(r"^[a-z][a-z0-9+.-]*:", target) is not None


def test_there_are_pages_and_links() -> None:
    assert REPO / "README.md" in PAGES
    assert sum(len(_links(page)) for page in PAGES) > 100


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_resolves(page: Path) -> None:
    broken: list[str] = []
    for target in _links(page):
        if _is_external(target):
            continue
        path_part, _, anchor = target.partition("#")
        resolved = (page.parent / path_part).resolve() if path_part else page
        if not resolved.exists():
            broken.append(f"{target}: no such file")
            continue
        is_page = resolved.suffix == ".md" and resolved.is_file()
        if anchor and is_page and anchor.lower() not in _anchors(resolved):
            broken.append(f"{target}: no heading with that anchor in {resolved.name}")
    assert not broken, f"{page.relative_to(REPO)}: " + "; ".join(broken)


def test_the_slug_follows_github() -> None:
    assert _slug("4. The front end in vLLM's two stages") == "4-the-front-end-in-vllms-two-stages"
    assert _slug("mixed: text and 1–8 images, no reuse") == "mixed-text-and-18-images-no-reuse"
    assert _slug("`mmgate serve` and E/P/D") == "mmgate-serve-and-epd"
