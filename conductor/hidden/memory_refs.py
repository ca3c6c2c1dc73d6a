"""What the model's `memory_read` reads: a note by id, a file by the ref a search result
gives (`<source>/<path>`), or one section of it (`<source>/<path>#<section trail>`).

Refs are resolved against fixed places only: a source of the user's search registry (its
include and exclude globs apply) or a layer file from the layers' fixed lists, so no ref
reaches outside the user's memory.
"""

from __future__ import annotations

import re
from pathlib import Path

from conductor.hidden.shared_context import note_id_of_file
from conductor.layers.inventory import layer_file_path
from conductor.layers.user_layers import UserLayers
from conductor.notes import NoteStore
from conductor.notes.note_format import Note
from conductor.search.chunks import split_markdown, without_frontmatter
from conductor.search.sources import Registry, Source

NOTE_ID = re.compile(r"^[0-9a-f]{10}$")


class RefError(ValueError):
    """A ref that names nothing readable; the message says why and holds no content."""


def read_ref(ref: str, store: NoteStore, layers: UserLayers, registry: Registry,
             visible: set[str] | None = None) -> str:
    """`visible`: the note ids the reader may read (None: all of the user's); a note
    outside it reads as no note, by id or by its file."""
    ref = ref.strip()
    if not ref:
        raise RefError("ref is empty")
    if NOTE_ID.match(ref):
        hidden = visible is not None and ref not in visible
        return _note_text(ref, None if hidden else store.get(ref))
    path_part, _, section = ref.partition("#")
    head, _, rel = path_part.strip("/").partition("/")
    source, file = _source_file(registry, head, rel) or (None, _layer_file(layers, head, rel))
    note_id = note_id_of_file(rel) if file is not None else None
    if note_id is not None and visible is not None and note_id not in visible:
        file = None
    if file is None:
        raise RefError(f"no memory file {path_part!r}: use a note id or a ref from "
                       "memory_search (e.g. semantic/facts.md)")
    text = (source.read(file) if source is not None
            else file.read_text(encoding="utf-8", errors="replace"))
    body, title = without_frontmatter(text)
    if not section.strip():
        return f"# {title}\n\n{body.strip()}" if title else body.strip()
    return _section(text, section.strip(), path_part)


def _note_text(note_id: str, note: Note | None) -> str:
    if note is None:
        raise RefError(f"no note {note_id}")
    if note.archived:
        raise RefError(f"note {note_id} is archived")
    about = f"{note.kind}, {note.scope} note, {note.status}, updated {note.updated:%Y-%m-%d}"
    return f"# {note.title}\n({about})\n\n{note.body.strip()}"


def _source_file(registry: Registry, source_id: str, rel: str) -> tuple[Source, Path] | None:
    """The source `source_id` and its file at `rel`, when the source indexes it."""
    source = next((s for s in registry.sources if s.id == source_id), None)
    file = dict(source.files()).get(rel) if source is not None and rel else None
    return (source, file) if file is not None else None


def _layer_file(layers: UserLayers, layer: str, name: str) -> Path | None:
    path = layer_file_path(layers, layer, name) if name else None
    return path if path is not None and path.is_file() else None


def _section(text: str, section: str, path_part: str) -> str:
    """The section whose heading trail is `section`, or ends with it ("Build" for
    "Facts > Build")."""
    chunks = split_markdown(text)
    found = [c for c in chunks if c.section == section]
    found = found or [c for c in chunks if c.section.endswith(f"> {section}")]
    if not found:
        raise RefError(f"no section {section!r} in {path_part}")
    trails = {c.section for c in found}
    if len(trails) > 1:
        raise RefError(f"{section!r} names {len(trails)} sections in {path_part}: give the "
                       "whole trail")
    return f"# {found[0].section}\n\n" + "\n\n".join(c.text for c in found)
