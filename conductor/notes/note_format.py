"""A note as a Python object, and its file form: YAML frontmatter, then a Markdown body.

---
id: 7f3a9c01d2
title: Run the tests with make test
kind: runbook
scope: project
...
changelog:
- {when: '2025-01-01T12:00:00Z', by: model, what: add, why: null, source: inline}
---
The body, at most 400 words.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import asdict, dataclass, field, fields
from datetime import UTC, date, datetime, time, timedelta
from pathlib import Path
from typing import Any

import yaml

# The time helpers live below the notes (the journal stamps with them too); they are named
# from here as well, as a note's file form is written with them.
from conductor.storage.clock import format_time, parse_time, utc_now  # noqa: F401
from conductor.storage.paths import slugify

KINDS = ("rule", "ruling", "gotcha", "runbook", "program_state", "reference", "registry", "archive")
SCOPES = ("user", "project", "session")
STATUSES = ("provisional", "ratified")
# Who wrote the text: the model inline in an answer, the background writer, the HTTP
# route, the dashboard, or the command line.
SOURCES = ("inline", "writer", "route", "dashboard", "cli", "command", "mcp")
FENCE = "---"

try:  # The C loader is ~10x faster; fall back when PyYAML was built without libyaml.
    _Loader: Any = yaml.CSafeLoader
    _Dumper: Any = yaml.CSafeDumper
except AttributeError:  # pragma: no cover
    _Loader, _Dumper = yaml.SafeLoader, yaml.SafeDumper


class NoteFormatError(ValueError):
    """A note file that cannot be read as a note."""


def normalise_verify_by(value: Any) -> str | None:
    """``YYYY-MM-DD`` or an ISO datetime string; ValueError when it is neither."""
    if value is None or value == "":
        return None
    if isinstance(value, datetime):
        return format_time(value)
    if isinstance(value, date):
        return value.isoformat()
    text = str(value).strip()
    if re.fullmatch(r"\d{4}-\d{2}-\d{2}", text):
        return date.fromisoformat(text).isoformat()
    return format_time(parse_time(text))


def verify_deadline(verify_by: str) -> datetime:
    """The moment a note turns stale: a plain date lasts to the end of that day (UTC)."""
    if re.fullmatch(r"\d{4}-\d{2}-\d{2}", verify_by):
        return datetime.combine(date.fromisoformat(verify_by), time(), UTC) + timedelta(days=1)
    return parse_time(verify_by)


def normalise_title(title: str) -> str:
    """The dedupe key of a title: case-folded words, punctuation and spacing dropped."""
    folded = unicodedata.normalize("NFKC", title).casefold()
    return " ".join(re.findall(r"\w+", folded))


def clean_title(title: str) -> str:
    """A title on one line with single spaces."""
    return " ".join(title.split())


def clean_tags(tags: Any) -> list[str]:
    """Tags as a list of distinct, trimmed, non-empty strings (a comma string is split)."""
    if tags is None:
        return []
    items = tags.split(",") if isinstance(tags, str) else list(tags)
    return list(dict.fromkeys(tag for tag in (" ".join(str(i).split()) for i in items) if tag))


def word_count(text: str) -> int:
    return len(text.split())


@dataclass
class Note:
    """One memory note. ``path`` is where it was read from (not stored in the file)."""

    id: str
    title: str
    kind: str
    scope: str
    body: str = ""
    tags: list[str] = field(default_factory=list)
    status: str = "provisional"
    pinned: bool = False
    created: datetime = field(default_factory=utc_now)
    updated: datetime = field(default_factory=utc_now)
    revision: int = 1
    source: str = "inline"
    project: str | None = None  # <name>-<hash8> of a project note
    project_path: str | None = None
    session: str | None = None  # key of a session note
    origin_session: str | None = None  # the conversation that created it (session cap)
    verify_by: str | None = None
    stale: bool = False
    archive_proposed: str | None = None  # a model's archive reason on a ratified note
    archived_at: datetime | None = None
    archive_reason: str | None = None
    changelog: list[dict[str, Any]] = field(default_factory=list)
    path: Path | None = field(default=None, compare=False, repr=False)

    @property
    def scope_key(self) -> str | None:
        """The project key, the session id, or None for user notes."""
        if self.scope == "project":
            return self.project
        if self.scope == "session":
            return self.session
        return None

    @property
    def archived(self) -> bool:
        return self.archived_at is not None

    @property
    def generation(self) -> tuple[int, int]:
        """Grows with every write (each one adds a changelog entry): picks the newest copy
        when a crash left two files with one id."""
        return (len(self.changelog), self.revision)

    @property
    def pin_active(self) -> bool:
        """A pin counts only while the note is a ratified rule."""
        return self.pinned and self.status == "ratified"

    def is_stale(self, now: datetime) -> bool:
        """Past ``verify_by`` (or marked stale by the nightly job): never injected."""
        if self.stale:
            return True
        return self.verify_by is not None and now >= verify_deadline(self.verify_by)

    def file_name(self) -> str:
        return f"{self.kind}-{slugify(self.title)}--{self.id}.md"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (times as ISO strings, no path)."""
        data = asdict(self)
        data.pop("path")
        for key in ("created", "updated", "archived_at"):
            if data[key] is not None:
                data[key] = format_time(data[key])
        return data


_FRONT_ORDER = [f.name for f in fields(Note) if f.name not in ("body", "path")]
_TIME_FIELDS = ("created", "updated", "archived_at")


def render(note: Note) -> str:
    """The file text of a note."""
    front: dict[str, Any] = {}
    for name in _FRONT_ORDER:
        value = getattr(note, name)
        if name in _TIME_FIELDS and value is not None:
            value = format_time(value)
        front[name] = value
    head = yaml.dump(
        front,
        Dumper=_Dumper,
        sort_keys=False,
        allow_unicode=True,
        default_flow_style=False,
        width=1000,
    )
    body = note.body.strip("\n")
    return f"{FENCE}\n{head}{FENCE}\n{body}\n" if body else f"{FENCE}\n{head}{FENCE}\n"


def parse(text: str, path: Path | None = None) -> Note:
    """A note from its file text; NoteFormatError when the text is not a note."""
    if not text.startswith(FENCE + "\n"):
        raise NoteFormatError(f"{path}: no frontmatter")
    end = text.find(f"\n{FENCE}\n", len(FENCE))
    if end < 0:
        if text.endswith(f"\n{FENCE}"):
            end = len(text) - len(FENCE) - 1
        else:
            raise NoteFormatError(f"{path}: frontmatter is not closed")
    try:
        front = yaml.load(text[len(FENCE) + 1 : end + 1], Loader=_Loader)
    except yaml.YAMLError as exc:
        raise NoteFormatError(f"{path}: bad frontmatter: {exc}") from exc
    if not isinstance(front, dict):
        raise NoteFormatError(f"{path}: frontmatter is not a mapping")
    body = text[end + len(FENCE) + 2 :].strip("\n")
    try:
        return _from_front(front, body, path)
    except (KeyError, TypeError, ValueError) as exc:
        raise NoteFormatError(f"{path}: {exc!r}") from exc


def _from_front(front: dict[str, Any], body: str, path: Path | None) -> Note:
    known = {f.name for f in fields(Note)}
    values = {k: v for k, v in front.items() if k in known and k not in ("body", "path")}
    for required in ("id", "title", "kind", "scope"):
        if not values.get(required):
            raise KeyError(required)
    for name in _TIME_FIELDS:
        if values.get(name) is not None:
            values[name] = parse_time(values[name])
    values["id"] = str(values["id"])
    values["title"] = str(values["title"])
    values["tags"] = clean_tags(values.get("tags"))
    values["revision"] = int(values.get("revision") or 1)
    values["pinned"] = bool(values.get("pinned"))
    values["stale"] = bool(values.get("stale"))
    if values.get("verify_by") is not None:
        values["verify_by"] = normalise_verify_by(values["verify_by"])
    for key in ("project", "project_path", "session", "origin_session"):
        if values.get(key) is not None:
            values[key] = str(values[key])
    values["changelog"] = [dict(e) for e in values.get("changelog") or [] if isinstance(e, dict)]
    return Note(body=body, path=path, **values)
