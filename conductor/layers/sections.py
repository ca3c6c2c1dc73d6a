"""Markdown files of fixed sections whose bullets carry stable entry ids.

    # Working memory

    ## Active Tasks
    - [w-3f2a9c] ship the layers

An entry's id is made once, from its file, section and first text, and kept through
rewrites, so a review can flag an entry and the next job can say what it did with it. A
bullet written by hand without an id gets one from its text (stable while the text is).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass

# An entry a review found no support for keeps its place with this mark (cognition jobs)
UNVERIFIED = "unverified: "
_BULLET = re.compile(r"^\s*[-*]\s+(?:\[([a-z]-[0-9a-f]{6})\]\s*)?(.*?)\s*$")
_HEADING = re.compile(r"^##\s+(.+?)\s*$")


@dataclass(frozen=True)
class Entry:
    id: str
    text: str


def entry_id(prefix: str, section: str, text: str) -> str:
    digest = hashlib.blake2b(f"{section}\0{text}".encode(), digest_size=3).hexdigest()
    return f"{prefix}-{digest}"


def parse_sections(text: str, sections: Sequence[str], prefix: str) -> dict[str, list[Entry]]:
    """The entries under each fixed section (headings matched case-blind); bullets under
    other headings, and lines that are not bullets, are not entries."""
    out: dict[str, list[Entry]] = {name: [] for name in sections}
    current: str | None = None
    for line in text.splitlines():
        heading = _HEADING.match(line)
        if heading:
            current = next((s for s in sections if s.lower() == heading.group(1).lower()), None)
            continue
        bullet = _BULLET.match(line)
        if current is not None and bullet and bullet.group(2):
            body = bullet.group(2)
            out[current].append(Entry(bullet.group(1) or entry_id(prefix, current, body), body))
    return out


def render_sections(title: str, sections: Sequence[str],
                    entries: dict[str, Sequence[Entry]]) -> str:
    """The file: its title, then every fixed section in order with its bullets."""
    out = [f"# {title}", ""]
    for name in sections:
        out.append(f"## {name}")
        out.extend(f"- [{e.id}] {_one_line(e.text)}" for e in entries.get(name, ()))
        out.append("")
    return "\n".join(out)


def _one_line(text: str) -> str:
    return " ".join(text.split())


def all_entries(parsed: dict[str, list[Entry]]) -> dict[str, tuple[str, Entry]]:
    """entry id -> (section, entry)."""
    return {e.id: (section, e) for section, entries in parsed.items() for e in entries}
