"""Relative links in README.md and docs/ resolve: the file exists and, for `#anchor`, so does the anchor.

Anchors are explicit `<a id="...">` tags or GitHub's heading slugs. Citations of decision records in the form
`decisions.md, D12` anywhere in the sources must name a record that exists (docs/decisions.md, "Adding a record").
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md")])

_FENCE = re.compile(r"^(```|~~~).*?^\1", re.M | re.S)
_CODE = re.compile(r"`[^`\n]*`")
_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
_ID = re.compile(r"<a\s+(?:id|name)=\"([^\"]+)\"")
_HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$", re.M)
_RECORD_CITE = re.compile(r"decisions\.md,?\s+\"?(D\d+)\b")


def _prose(text: str) -> str:
    """The text without fenced blocks and code spans (links there are examples, not links)."""
    return _CODE.sub("", _FENCE.sub("", text))


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"<[^>]+>", "", heading).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = _FENCE.sub("", path.read_text(encoding="utf-8"))
    found = set(_ID.findall(text))
    seen: dict[str, int] = {}
    for heading in _HEADING.findall(text):
        base = slug(heading)
        count = seen.get(base, 0)
        found.add(base if count == 0 else f"{base}-{count}")
        seen[base] = count + 1
    return found


def broken_links(path: Path) -> list[str]:
    broken = []
    for target in _LINK.findall(_prose(path.read_text(encoding="utf-8"))):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        if not dest.exists():
            broken.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target}: no such anchor")
    return broken


@pytest.mark.parametrize("path", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(path: Path) -> None:
    assert broken_links(path) == []


def test_cited_decision_records_exist() -> None:
    records = {a.upper() for a in anchors(ROOT / "docs" / "decisions.md") if re.fullmatch(r"d\d+", a)}
    cited: dict[str, str] = {}
    for base in ("src", "tests", "bench", "scripts", "docs", "README.md", "Makefile"):
        paths = [ROOT / base] if (ROOT / base).is_file() else sorted((ROOT / base).rglob("*"))
        for path in paths:
            if path.is_file() and path.suffix in {".py", ".md", ".sh", ""}:
                for record in _RECORD_CITE.findall(path.read_text(encoding="utf-8", errors="replace")):
                    cited.setdefault(record, str(path.relative_to(ROOT)))
    assert {r: where for r, where in cited.items() if r not in records} == {}


def test_the_checker_finds_a_broken_link(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text('# Title\n<a id="d1"></a>\n## D1 — X\n', encoding="utf-8")
    page = tmp_path / "b.md"
    page.write_text(
        "[ok](a.md#d1) [ok](a.md#title) [ok](a.md#d1--x) `[code](nowhere.md)` [bad](a.md#d2) [bad](c.md) [w](https://x)\n",
        encoding="utf-8",
    )
    assert broken_links(page) == ["a.md#d2: no such anchor", "c.md: no such file"]
