"""The user docs' text, for the tests that check the docs state what the code does.

README.md is a short front page; the text lives in docs/ (README.md's index links each
page). A test names the page a claim is on, or reads all of them, so a page's move is one
edit here or in that test's page name."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"


def doc_pages() -> list[Path]:
    """README.md, then every page under docs/, in a stable order."""
    return [README, *sorted(DOCS.rglob("*.md"))]


def docs_text(page: str | None = None) -> str:
    """One page's text (`"docs/serving/replicas.md"`, `"README.md"`), or with no page all
    of the user docs joined."""
    if page is not None:
        return (ROOT / page).read_text(encoding="utf-8")
    return "\n\n".join(path.read_text(encoding="utf-8") for path in doc_pages())


def section(page: str, heading: str) -> str:
    """The text under a heading of a page (`"Codex CLI"`), up to the next heading of the
    same or a higher level; a heading the page lacks raises, naming it."""
    lines = docs_text(page).splitlines()
    headings, fenced = [], False  # (line, level, text) outside code blocks
    for i, line in enumerate(lines):
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and (match := re.match(r"(#+) (.*)", line)):
            headings.append((i, len(match.group(1)), match.group(2).strip()))
    for n, (i, level, text) in enumerate(headings):
        if text == heading:
            end = next((j for j, deeper, _ in headings[n + 1:] if deeper <= level), len(lines))
            return "\n".join(lines[i + 1:end])
    raise AssertionError(f"{page} has no heading {heading!r}")


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation but '-' and '_' dropped,
    spaces made '-'."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """The anchors a page's headings make (outside code blocks)."""
    found, fenced = set(), False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and (match := re.match(r"#+ (.*)", line)):
            found.add(slug(match.group(1)))
    return found
