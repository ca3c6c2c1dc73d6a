"""BM25 search over notes with tantivy.

The index is derived data: it lives under ``<root>/index/<user>/`` next to a
``fingerprint.json`` that names the exact set of note files (path, inode, mtime, size)
it was built from. When the files no longer match (a crash mid-write, a hand edit, an
older schema), the store rebuilds the index from the files; the files stay the truth.

Queries are built from the words of the text only (lower-cased ``\\w+`` runs), so no user
or model text is ever read as query syntax.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Protocol

import tantivy

from conductor.storage.atomic import DIR_MODE, FILE_MODE, atomic_write, ensure_dir

SCHEMA_VERSION = 1
TEXT_FIELDS = ("title", "tags", "body")
# A title word says more about what a note is than a body word.
FIELD_BOOSTS = {"title": 2.0, "tags": 1.5, "body": 1.0}
FILTER_FIELDS = ("scope", "kind", "status", "project", "session", "state")
MAX_QUERY_TERMS = 256
# tantivy's tokenizers drop tokens of 40 bytes or more; such words can never match.
MAX_TERM_BYTES = 39
WRITER_HEAP = 15_000_000
FINGERPRINT_FILE = "fingerprint.json"


class IndexedNote(Protocol):
    """What the index reads of a note (``conductor.notes.note_format.Note`` has it all):
    the search sits below the notes store, which keeps this index, so it names the fields
    it reads rather than importing the notes' type."""

    id: str
    title: str
    tags: list[str]
    body: str
    scope: str
    kind: str
    status: str
    project: str | None
    session: str | None

    @property
    def archived(self) -> bool: ...


def query_terms(text: str, limit: int = MAX_QUERY_TERMS) -> list[str]:
    """The distinct lower-cased words of ``text``, in order, at most ``limit``."""
    words = dict.fromkeys(
        w for w in re.findall(r"\w+", text.lower()) if len(w.encode()) <= MAX_TERM_BYTES
    )
    return list(words)[:limit]


# The index's own analysis (tantivy's "en_stem": split, drop long tokens, lower-case,
# Porter's English stemmer), for a caller that compares words as the index does.
_EN_STEM = (tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.simple())
            .filter(tantivy.Filter.remove_long(MAX_TERM_BYTES + 1))
            .filter(tantivy.Filter.lowercase())
            .filter(tantivy.Filter.stemmer("english")).build())


def stems(words: Iterable[str]) -> set[str]:
    """The index's stems of ``words`` ("dog's" is "dog", "migrations" "migrat"), without
    the one-letter ones a possessive leaves."""
    return {t for t in _EN_STEM.analyze(" ".join(words)) if len(t) > 1}


def note_text(note: IndexedNote) -> str:
    """The searchable text of a note: title, tags and body."""
    return "\n".join([note.title, " ".join(note.tags), note.body])


def _schema() -> tantivy.Schema:
    builder = tantivy.SchemaBuilder()
    builder.add_text_field("id", stored=True, tokenizer_name="raw")
    for name in TEXT_FIELDS:
        # en_stem lower-cases and stems, so "runs" finds "running".
        builder.add_text_field(name, tokenizer_name="en_stem")
    for name in FILTER_FIELDS:
        builder.add_text_field(name, tokenizer_name="raw")
    return builder.build()


def _document(note: IndexedNote) -> tantivy.Document:
    values = {
        "id": note.id,
        "title": note.title,
        "tags": " ".join(note.tags),
        "body": note.body,
        "scope": note.scope,
        "kind": note.kind,
        "status": note.status,
        "project": note.project,
        "session": note.session,
        "state": "archived" if note.archived else "live",
    }
    return tantivy.Document(**{k: v for k, v in values.items() if v})


class NoteIndex:
    """One user's tantivy index. Writers must hold the user's store lock."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._meta_path = os.path.join(directory, "meta.json")  # a string: stat'ed per search
        self.schema = _schema()
        self._index: tantivy.Index | None = None
        self._loaded_meta: tuple[int, int, int] | None = None  # meta.json when last reloaded
        # The fingerprint last found fresh, with meta.json's stamp then: every commit, this
        # process's or another's, replaces meta.json, so while it stands the index is the
        # one that fingerprint.json matched, and the file need not be read again.
        self._fresh: tuple[str, tuple[int, int, int]] | None = None

    # -- freshness ---------------------------------------------------------------

    def stored_fingerprint(self) -> str | None:
        try:
            data = json.loads((self.directory / FINGERPRINT_FILE).read_text(encoding="utf-8"))
        except (FileNotFoundError, json.JSONDecodeError):
            return None
        if not isinstance(data, dict) or data.get("schema") != SCHEMA_VERSION:
            return None
        value = data.get("fingerprint")
        return value if isinstance(value, str) else None

    def is_fresh(self, fingerprint: str) -> bool:
        """Whether the index was built from the files ``fingerprint`` names. Asked before
        every search: fingerprint.json is read only when the fingerprint or meta.json
        changed since it last matched (a stat, not a read and a parse, per search)."""
        stamp = _meta_stamp(self._meta_path)
        if stamp is None:
            return False
        if self._fresh == (fingerprint, stamp):
            return True
        if self.stored_fingerprint() != fingerprint:
            return False
        self._fresh = (fingerprint, stamp)
        return True

    def _save_fingerprint(self, fingerprint: str) -> None:
        payload = json.dumps({"schema": SCHEMA_VERSION, "fingerprint": fingerprint})
        atomic_write(self.directory / FINGERPRINT_FILE, payload + "\n", kind="note_index")

    def _forget_fingerprint(self) -> None:
        self._fresh = None
        try:
            os.unlink(self.directory / FINGERPRINT_FILE)
        except FileNotFoundError:
            pass

    # -- writing -----------------------------------------------------------------

    def _open(self) -> tantivy.Index:
        if self._index is None:
            ensure_dir(self.directory)
            try:
                self._index = tantivy.Index(self.schema, path=str(self.directory), reuse=True)
            except (OSError, ValueError):
                # A broken or foreign index: it is derived data, start again.
                self.wipe()
                ensure_dir(self.directory)
                self._index = tantivy.Index(self.schema, path=str(self.directory), reuse=False)
        return self._index

    def wipe(self) -> None:
        """Delete the index folder (it is rebuilt from the files when next needed)."""
        self._index = None
        self._loaded_meta = None
        self._fresh = None
        shutil.rmtree(self.directory, ignore_errors=True)

    def rebuild(self, notes: Iterable[IndexedNote], fingerprint: str) -> None:
        """Index exactly ``notes`` and record the files' fingerprint."""
        self._forget_fingerprint()
        index = self._open()
        writer = index.writer(heap_size=WRITER_HEAP, num_threads=1)
        writer.delete_all_documents()
        for note in notes:
            writer.add_document(_document(note))
        self._commit(writer, fingerprint)

    def apply(self, upserts: Iterable[IndexedNote], removed: Iterable[str],
              fingerprint: str) -> None:
        """Replace the documents of ``upserts``, drop ``removed`` ids, record the fingerprint."""
        self._forget_fingerprint()  # a crash before the commit leaves the index "stale"
        index = self._open()
        writer = index.writer(heap_size=WRITER_HEAP, num_threads=1)
        for note_id in removed:
            writer.delete_documents_by_term("id", note_id)
        for note in upserts:
            writer.delete_documents_by_term("id", note.id)
            writer.add_document(_document(note))
        self._commit(writer, fingerprint)

    def _commit(self, writer: tantivy.IndexWriter, fingerprint: str) -> None:
        writer.commit()
        writer.wait_merging_threads()  # also releases tantivy's own writer lock
        self._private_modes()
        self._save_fingerprint(fingerprint)

    def _private_modes(self) -> None:
        os.chmod(self.directory, DIR_MODE)
        for entry in os.scandir(self.directory):
            if entry.is_file(follow_symlinks=False):
                os.chmod(entry.path, FILE_MODE)

    # -- reading -----------------------------------------------------------------

    def _searcher(self) -> tantivy.Searcher:
        index = self._open()
        # See commits made by other store objects and processes: tantivy rewrites
        # meta.json on every commit, so a reload is needed only when it changed.
        stamp = _meta_stamp(self._meta_path)
        if stamp is None or stamp != self._loaded_meta:
            index.reload()
            self._loaded_meta = stamp
        return index.searcher()

    def _query(self, text: str, filters: Mapping[str, str | None]) -> tantivy.Query | None:
        terms = query_terms(text)
        if not terms:
            return None
        index = self._open()
        try:
            text_query = index.parse_query(
                " ".join(terms), list(TEXT_FIELDS), field_boosts=dict(FIELD_BOOSTS)
            )
        except ValueError:  # every word was dropped by the tokenizer
            return None
        clauses = [(tantivy.Occur.Must, text_query)]
        for name, value in filters.items():
            if value is None:
                continue
            if name not in (*FILTER_FIELDS, "id"):
                raise ValueError(f"unknown filter {name!r}")
            term = tantivy.Query.term_query(self.schema, name, value)
            # Filters select, they do not score: a zero constant score keeps BM25 pure.
            clauses.append((tantivy.Occur.Must, tantivy.Query.const_score_query(term, 0.0)))
        return tantivy.Query.boolean_query(clauses)

    def search(
        self, text: str, filters: Mapping[str, str | None] | None = None, limit: int = 10
    ) -> list[tuple[str, float]]:
        """``(id, BM25 score)`` pairs, best first."""
        query = self._query(text, filters or {})
        if query is None or limit <= 0:
            return []
        searcher = self._searcher()
        hits = searcher.search(query, limit=limit).hits
        out: list[tuple[str, float]] = []
        for score, address in hits:
            ids = searcher.doc(address)["id"]
            if ids:
                out.append((ids[0], float(score)))
        return out

    def score(self, text: str, note_id: str) -> float:
        """The BM25 score ``text`` gets against one note (0.0 when it does not match)."""
        hits = self.search(text, {"id": note_id}, limit=1)
        return hits[0][1] if hits else 0.0


def _meta_stamp(meta_path: str) -> tuple[int, int, int] | None:
    """meta.json's inode, size and mtime (ns): a commit replaces it (None: unreadable)."""
    try:
        meta = os.stat(meta_path)
    except OSError:
        return None
    return meta.st_ino, meta.st_size, meta.st_mtime_ns
