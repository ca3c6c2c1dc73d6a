"""Markdown into chunks: one a section, split by headings, each with its heading trail
("Facts > About the user"); a long section is cut at paragraph ends. YAML frontmatter
(as notes have) is dropped, its title kept as the top of the trail. A file that is a
title and nothing else (a note remembered by its title alone) is one chunk, the title
its trail and its text empty: the title is all there is to find it by."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Any

import yaml

MAX_CHUNK_CHARS = 1500
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_TITLE = re.compile(r"^title:[ \t]*(.+?)[ \t]*$", re.MULTILINE)
# libyaml's loader reads a note's frontmatter many times faster (every file of an index
# sync is read); PyYAML built without libyaml has the pure Python one only.
LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@dataclass(frozen=True)
class Chunk:
    section: str  # the heading trail
    text: str

    @property
    def hash(self) -> str:
        return hashlib.blake2b(f"{self.section}\0{self.text}".encode(), digest_size=12).hexdigest()


def split_markdown(text: str, whole: bool = False) -> list[Chunk]:
    """The file's chunks; `whole`: the file is one chunk already (a chunked tree)."""
    body, title = without_frontmatter(text)
    if whole:
        body = body.strip()
        return [Chunk(title or "", body)] if body else _title_only(title)
    trail: list[tuple[int, str]] = [(0, title)] if title else []
    chunks: list[Chunk] = []
    lines: list[str] = []

    def flush() -> None:
        section = " > ".join(t for _, t in trail)
        for piece in _pieces("\n".join(lines).strip()):
            chunks.append(Chunk(section, piece))
        lines.clear()

    for line in body.splitlines():
        heading = _HEADING.match(line)
        if heading:
            flush()
            level = len(heading.group(1))
            trail = [(lv, t) for lv, t in trail if lv < level]
            trail.append((level, heading.group(2)))
        else:
            lines.append(line)
    flush()
    return chunks or _title_only(title)


def _title_only(title: str | None) -> list[Chunk]:
    """The chunk of a file with no text but its title (none without a title either)."""
    return [Chunk(title, "")] if title else []


def without_frontmatter(text: str) -> tuple[str, str | None]:
    """The text past its frontmatter, and the frontmatter's title (None: it has none)."""
    if not text.startswith("---\n"):
        return text, None
    end = text.find("\n---", 4)
    if end < 0:
        return text, None
    return text[end + 4:].lstrip("\n"), _title(text[4:end])


def _title(front: str) -> str | None:
    """The frontmatter's title as YAML reads it (a quoted title such as 'It''s: here' or
    "caf\\u00e9" unquoted, a long one wrapped onto lines whole), so the trail says what
    the note's title says; a title that is no text (`title: 1234`) as written. Read once;
    frontmatter YAML cannot read as a whole gives its title line, read alone."""
    try:
        fields = yaml.load(front, Loader=LOADER)  # noqa: S506 (a safe loader)
    except yaml.YAMLError:
        fields = None
    if isinstance(fields, dict) and isinstance(fields.get("title"), str):
        return fields["title"]
    match = _TITLE.search(front)
    if match is None:
        return None
    return match.group(1).strip("'\"") if isinstance(fields, dict) else _scalar(match.group(1))


def _scalar(raw: str) -> str:
    """The title line's value read alone (its frontmatter is no YAML as a whole)."""
    try:
        value = yaml.load(raw, Loader=LOADER)  # noqa: S506 (a safe loader)
    except yaml.YAMLError:
        return raw.strip("'\"")
    return value if isinstance(value, str) else raw.strip("'\"")


def _pieces(text: str) -> list[str]:
    if not text:
        return []
    if len(text) <= MAX_CHUNK_CHARS:
        return [text]
    out, current = [], ""
    for paragraph in text.split("\n\n"):
        if current and len(current) + len(paragraph) + 2 > MAX_CHUNK_CHARS:
            out.append(current)
            current = ""
        current = f"{current}\n\n{paragraph}" if current else paragraph
        while len(current) > MAX_CHUNK_CHARS:  # one paragraph longer than a chunk
            out.append(current[:MAX_CHUNK_CHARS])
            current = current[MAX_CHUNK_CHARS:]
    if current:
        out.append(current)
    return out
