"""What one user's search indexes: ``layers/<user>/embed/sources.json``, or the defaults.

    {"sources": [{"id": "notes", "collection": "notes", "type": "markdown_tree",
                  "path": "notes/{user}", "include": ["**/*.md"], "exclude": []}]}

A relative path is under the memory root (``$TANDEM_HOME/memory``), ``{user}`` replaced by
the user's name. A bad registry is a `SourceError` naming the entry and what is wrong.

A source stays inside the user's own memory folders (``notes/<user>``, ``layers/<user>``,
``library/<user>`` for documents) or a root the operator allows in the profile
(``memory.search.allowed_roots``): the file is the user's to edit, and ``memory_read``
reads what it names, so a path to ``/etc/passwd``, a ``..`` or another user's folder is
refused, and a file that is a symlink out of its source is not indexed or read.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from fnmatch import fnmatch
from pathlib import Path

from conductor.search.turn_text import turn_markdown

COLLECTIONS = ("core", "semantic", "notes", "history", "library", "zettelkasten")
# history_turns: the history layer's turn files (JSON), read as Markdown (`turn_text.py`)
TYPES = ("markdown_tree", "markdown_file", "chunked_markdown_tree", "history_turns")
SOURCES_FILE = "sources.json"


class SourceError(ValueError):
    """A registry that cannot be used; the message names the entry."""


@dataclass(frozen=True)
class Source:
    id: str
    collection: str
    type: str
    path: Path  # resolved
    include: tuple[str, ...] = ("**/*.md",)
    exclude: tuple[str, ...] = ()

    def read(self, path: Path) -> str:
        """A file of the source as search chunks it and `memory_read` shows it."""
        text = path.read_text(encoding="utf-8", errors="replace")
        return turn_markdown(text) if self.type == "history_turns" else text

    def files(self) -> list[tuple[str, Path]]:
        """(path relative to the source, absolute path) of every file it indexes; a file
        that resolves outside the source (a symlink out) is left out."""
        if self.type == "markdown_file":
            return [(self.path.name, self.path)] if self.path.is_file() else []
        if not self.path.is_dir():
            return []
        out = []
        for path in sorted(self.path.rglob("*")):
            if not path.is_file() or path.name.startswith("."):
                continue
            if not path.resolve().is_relative_to(self.path):
                continue
            rel = path.relative_to(self.path).as_posix()
            if _matches(rel, self.include) and not _matches(rel, self.exclude):
                out.append((rel, path))
        return out


def _matches(rel: str, patterns: tuple[str, ...]) -> bool:
    """fnmatch, where "**/" may also match no folder at all ("user/**/*.md" matches
    "user/a.md", "**/*.md" matches "a.md"), as people expect of globs."""
    for pattern in patterns:
        forms = {pattern, pattern.replace("/**/", "/")}
        if pattern.startswith("**/"):
            forms.add(pattern[3:])
        if any(fnmatch(rel, form) for form in forms):
            return True
    return False


@dataclass(frozen=True)
class Registry:
    path: Path  # where sources.json is (or would be)
    sources: tuple[Source, ...] = field(default_factory=tuple)
    from_file: bool = False


def default_sources(root: Path, user: str) -> list[dict]:
    return [
        {"id": "core", "collection": "core", "type": "markdown_tree",
         "path": f"layers/{user}/core"},
        {"id": "semantic", "collection": "semantic", "type": "markdown_tree",
         "path": f"layers/{user}/semantic"},
        {"id": "notes", "collection": "notes", "type": "markdown_tree",
         "path": f"notes/{user}", "include": ["user/**/*.md", "projects/**/*.md",
                                              "sessions/**/*.md"]},
        # the continuous conversation's turns: a question finds the turn that answers it
        {"id": "history", "collection": "history", "type": "history_turns",
         "path": f"layers/{user}/history/turns", "include": ["**/*.json"]},
    ]


def user_roots(root: Path, user: str, allowed: tuple[Path, ...] = ()) -> tuple[Path, ...]:
    """Where the user's sources may be: their memory folders and the operator's roots."""
    return tuple(p.resolve() for p in (root / "notes" / user, root / "layers" / user,
                                       root / "library" / user, *allowed))


def load_sources(root: Path, user: str, embed_dir: Path,
                 allowed_roots: tuple[Path, ...] = ()) -> Registry:
    """The user's registry; the defaults when there is no file. `allowed_roots`: the
    profile's `memory.search.allowed_roots`, beside the user's own memory folders."""
    path = embed_dir / SOURCES_FILE
    if not path.exists():
        entries, from_file = default_sources(root, user), False
    else:
        try:
            raw = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise SourceError(f"{path}: not valid JSON ({exc})") from None
        if not isinstance(raw, dict) or not isinstance(raw.get("sources"), list):
            raise SourceError(f'{path}: needs {{"sources": [...]}}')
        entries, from_file = raw["sources"], True
    seen: set[str] = set()
    sources = []
    for n, entry in enumerate(entries):
        source = _source(path, root, user, n, entry, check_path=from_file,
                         roots=user_roots(root, user, allowed_roots))
        if source.id in seen:
            raise SourceError(f"{path}: source {source.id!r}: the id is used twice")
        seen.add(source.id)
        sources.append(source)
    return Registry(path, tuple(sources), from_file)


def _source(path: Path, root: Path, user: str, n: int, entry, check_path: bool,
            roots: tuple[Path, ...] = ()) -> Source:
    if not isinstance(entry, dict):
        raise SourceError(f"{path}: source #{n + 1}: not an object")
    name = entry.get("id")
    label = f"source {name!r}" if isinstance(name, str) and name else f"source #{n + 1}"
    if not isinstance(name, str) or not name:
        raise SourceError(f"{path}: {label}: needs an id")
    unknown = set(entry) - {"id", "collection", "type", "path", "include", "exclude"}
    if unknown:
        raise SourceError(f"{path}: {label}: unknown keys {sorted(unknown)}")
    if entry.get("collection") not in COLLECTIONS:
        raise SourceError(f"{path}: {label}: collection must be one of "
                          f"{', '.join(COLLECTIONS)}, got {entry.get('collection')!r}")
    if entry.get("type") not in TYPES:
        raise SourceError(f"{path}: {label}: type must be one of {', '.join(TYPES)}, "
                          f"got {entry.get('type')!r}")
    raw_path = entry.get("path")
    if not isinstance(raw_path, str) or not raw_path:
        raise SourceError(f"{path}: {label}: needs a path")
    resolved = Path(raw_path.replace("{user}", user)).expanduser()
    resolved = (resolved if resolved.is_absolute() else root / resolved).resolve()
    if check_path and not resolved.exists():
        raise SourceError(f"{path}: {label}: path {str(resolved)!r} does not exist")
    if roots and not any(resolved.is_relative_to(r) for r in roots):
        raise SourceError(f"{path}: {label}: path {raw_path!r} is outside this user's "
                          "memory folders (notes/<user>, layers/<user>, library/<user>) and "
                          "the profile's memory.search.allowed_roots")
    globs = {}
    for key, default in (("include", ["**/*.md"]), ("exclude", [])):
        value = entry.get(key, default)
        if not isinstance(value, list) or not all(isinstance(g, str) for g in value):
            raise SourceError(f"{path}: {label}: {key} must be a list of globs")
        globs[key] = tuple(value)
    return Source(name, entry["collection"], entry["type"], resolved, **globs)
