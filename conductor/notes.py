"""The memory note store: every memory feature writes through it. The files are the truth.

One ``NoteStore`` serves one user's tree under a memory root (``$TANDEM_HOME/memory``):

    store = NoteStore(root, "alice")            # clock=... to inject time in tests
    other = store.for_user("bob")               # same root, another user's tree

Model side (the inline answer, the background writer, the HTTP route, the dashboard):
``add``, ``update`` and ``archive``, each with a ``source`` and, for ``add``/``update``,
``has_user_message``. The model only writes provisional notes.

User side (dashboard and CLI, ``via=``): ``edit`` (a ratified revision), ``ratify``,
``reject``, ``pin``, ``user_archive``, ``delete``, ``delete_all``.

Reading: ``get``, ``list``, ``search``; usage: ``record_injection``, ``uses_in_days``;
upkeep: ``regenerate_index`` and the nightly helpers used by ``conductor.nightly``.

Every write returns a ``WriteResult``. A write that breaks a rule is refused with a
machine-readable ``reason`` (``conductor.rules.Reason``), never raised; an I/O failure is
returned as ``io_error``. Wrong argument types raise. Writes hold a per-user ``flock``, so
threads and processes lose no note; each file is replaced atomically, so a crash leaves
the old note whole. Every write, refusal, injection and nightly run is journaled without
titles or bodies.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import logging
import os
import shutil
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

from conductor import dedupe
from conductor.atomic import DIR_MODE, FileLock, atomic_write, ensure_dir, remove_file
from conductor.export import export_tree
from conductor.index_md import render_index_md
from conductor.journal import Journal
from conductor.note_format import (
    KINDS,
    SCOPES,
    SOURCES,
    Note,
    NoteFormatError,
    clean_tags,
    format_time,
    parse,
    render,
    utc_now,
)
from conductor.note_search import NoteIndex, note_text
from conductor.paths import (
    Layout,
    StoreRootError,
    git_work_tree_of,
    project_key,
    valid_user,
)
from conductor.rules import (
    Caps,
    Content,
    Reason,
    Refusal,
    check_content,
    clean_reason,
    needs_user_message,
    resolve_scope,
)
from conductor.usage import UsageBook

log = logging.getLogger(__name__)

USER_VIAS = ("dashboard", "cli", "route")
STATES = ("live", "archived", "all")
TEMP_FILE_AGE = timedelta(hours=1)
# The folders a user's notes live in, in scan order, and whether they hold archived notes.
_TREES = (("user", False), ("projects", False), ("sessions", False), ("archive", True))
_RULE_DETAIL = "a rule about the user needs the user's own message in the turn"

P = ParamSpec("P")
R = TypeVar("R")


@dataclass
class WriteResult:
    """What a write did. ``ok`` False means refused; ``reason`` says why.

    ``op`` is the operation asked for; ``revised_existing`` is True when an ``add`` became
    a revision of a note already stored (same title or close BM25 match).
    ``kept_live`` is True when a model archived a ratified note: it stays live with the
    reason in its changelog until the user decides.
    """

    ok: bool
    reason: str | None
    note: Note | None
    op: str
    redactions: int = 0
    revised_existing: bool = False
    kept_live: bool = False
    detail: str | None = None
    redaction_counts: dict[str, int] = field(default_factory=dict)
    count: int = 0  # notes touched by delete_all


@dataclass
class _Snapshot:
    """The user's notes as the files say now."""

    notes: dict[str, Note]  # id -> newest copy
    stale_copies: list[Path]  # older copies left by a crash between write and unlink
    fingerprint: str


def _guard(op: str) -> Callable[[Callable[P, WriteResult]], Callable[P, WriteResult]]:
    """Turn an OSError inside a write into an ``io_error`` result (journaled, logged)."""

    def wrap(method: Callable[P, WriteResult]) -> Callable[P, WriteResult]:
        @functools.wraps(method)
        def run(*args: P.args, **kwargs: P.kwargs) -> WriteResult:
            try:
                return method(*args, **kwargs)
            except OSError as exc:
                store = args[0]
                assert isinstance(store, NoteStore)
                log.exception("note store %s failed", op)
                try:
                    store._journal(op, ok=False, reason=Reason.IO_ERROR)
                except OSError:
                    pass
                return WriteResult(False, Reason.IO_ERROR, None, op, detail=str(exc))

        return run

    return wrap


class NoteStore:
    """One user's memory notes under ``root`` (``$TANDEM_HOME/memory``)."""

    def __init__(
        self,
        root: Path | str,
        user: str,
        *,
        clock: Callable[[], datetime] = utc_now,
        caps: Caps | None = None,
    ) -> None:
        if not valid_user(user):
            raise ValueError(f"bad user name {user!r}")
        root = Path(os.path.abspath(Path(root).expanduser()))
        work_tree = git_work_tree_of(root)
        if work_tree is not None:
            raise StoreRootError(
                f"memory root {root} lies inside the git work tree {work_tree}; "
                "notes are private and must not be committed"
            )
        self.root = root
        self.user = user
        self.clock = clock
        self.caps = caps or Caps()
        self.layout = Layout(root, user)
        for folder in (root, root / "notes", self.layout.user_dir):
            ensure_dir(folder)
            os.chmod(folder, DIR_MODE)
        self._lock = FileLock(self.layout.lock_path)
        self._journal_file = Journal(self.layout.journal_path, clock)
        self._usage = UsageBook(self.layout.usage_json)
        self._index = NoteIndex(self.layout.index_dir)
        self._parsed: dict[str, tuple[tuple[int, int, int], Note]] = {}
        self._pinned = threading.local()  # .snapshot: the scan reads share inside one_scan()

    def for_user(self, user: str) -> NoteStore:
        """A store for another user under the same root, with the same clock and caps."""
        return NoteStore(self.root, user, clock=self.clock, caps=self.caps)

    @property
    def journal(self) -> Journal:
        return self._journal_file

    def _now(self) -> datetime:
        """The injected clock's time in UTC (archive months and stamps are UTC)."""
        return self.clock().astimezone(UTC)

    # ------------------------------------------------------------------ model side

    @_guard("add")
    def add(
        self,
        *,
        title: str,
        body: str = "",
        kind: str,
        scope: str,
        tags: Iterable[str] | str | None = None,
        project: str | os.PathLike[str] | None = None,
        session: str | None = None,
        verify_by: Any = None,
        source: str = "inline",
        has_user_message: bool = False,
    ) -> WriteResult:
        """Add a provisional note, or revise the same fact already stored in its scope.

        ``project`` is the working directory of a project note; ``session`` the
        conversation the write comes from (the key of a session note, and what the
        20-notes-a-session cap counts).
        """
        _check_source(source)
        op = "add"
        content = check_content(
            title=title, body=body, tags=tags, kind=kind, verify_by=verify_by, caps=self.caps
        )
        where = resolve_scope(scope, project, session)
        if isinstance(where, Refusal):
            return self._refuse(op, where, kind=kind, source=source)
        if isinstance(content, Refusal):
            return self._refuse(op, content, kind=kind, scope=scope, source=source)
        if needs_user_message(content.kind, where.scope, source, has_user_message):
            return self._refuse(
                op,
                Refusal(Reason.RULE_NEEDS_USER_MESSAGE, _RULE_DETAIL),
                kind=kind,
                scope=scope,
                source=source,
            )
        with self._writing() as snap:
            filters = _scope_filters(where.scope, where.key)
            existing = dedupe.find_duplicate(
                self._index,
                snap.notes,
                title=content.title,
                body=content.body,
                text=note_text(_as_note(content)),
                filters=filters,
            )
            if existing is not None:
                if needs_user_message(existing.kind, existing.scope, source, has_user_message):
                    return self._refuse(
                        op,
                        Refusal(Reason.RULE_NEEDS_USER_MESSAGE, _RULE_DETAIL),
                        note_id=existing.id,
                        kind=kind,
                        scope=scope,
                        source=source,
                    )
                return self._revise(
                    existing,
                    content,
                    by="model",
                    source=source,
                    why=None,
                    op=op,
                    revised_existing=True,
                )
            refusal = self._over_cap(snap, where.origin_session)
            if refusal is not None:
                return self._refuse(op, refusal, kind=kind, scope=scope, source=source)
            now = self._now()
            note = Note(
                id=_new_id(snap.notes),
                title=content.title,
                kind=content.kind,
                scope=where.scope,
                body=content.body,
                tags=content.tags,
                status="provisional",
                created=now,
                updated=now,
                source=source,
                project=where.key if where.scope == "project" else None,
                project_path=where.project_path,
                session=where.key if where.scope == "session" else None,
                origin_session=where.origin_session,
                verify_by=content.verify_by,
                changelog=[_entry(now, "model", "add", None, source)],
            )
            self._write(note)
            self._reindex([note.id])
            return self._done(op, note, content=content, source=source, by="model")

    @_guard("update")
    def update(
        self,
        note_id: str,
        *,
        title: str | None = None,
        body: str | None = None,
        tags: Iterable[str] | str | None = None,
        kind: str | None = None,
        verify_by: Any = None,
        reason: str | None = None,
        source: str = "inline",
        has_user_message: bool = False,
    ) -> WriteResult:
        """A model's revision of a note (fields left None are kept). A ratified note
        becomes provisional again; the earlier text goes to ``revisions/<id>/<n>.md``."""
        _check_source(source)
        op = "update"
        with self._writing() as snap:
            note = self._live_note(snap, op, note_id, source=source)
            if isinstance(note, WriteResult):
                return note
            content = self._merged_content(note, title, body, tags, kind, verify_by)
            if isinstance(content, Refusal):
                return self._refuse(
                    op,
                    content,
                    note_id=note_id,
                    kind=kind or note.kind,
                    scope=note.scope,
                    source=source,
                )
            if any(
                needs_user_message(k, note.scope, source, has_user_message)
                for k in (note.kind, content.kind)
            ):
                return self._refuse(
                    op,
                    Refusal(Reason.RULE_NEEDS_USER_MESSAGE, _RULE_DETAIL),
                    note_id=note_id,
                    kind=content.kind,
                    scope=note.scope,
                    source=source,
                )
            why = clean_reason(reason) if reason else None
            return self._revise(note, content, by="model", source=source, why=why, op=op)

    @_guard("archive")
    def archive(
        self,
        note_id: str,
        reason: str,
        *,
        source: str = "inline",
        has_user_message: bool = False,
    ) -> WriteResult:
        """A model's archive. A provisional note moves to ``archive/``; a ratified one stays
        live with the reason in its changelog until the user archives or ratifies it.

        ``has_user_message`` is accepted so the three model operations share one call
        shape; archiving needs no user message (the user's own notes are protected by
        ratification instead).
        """
        del has_user_message
        _check_source(source)
        op = "archive"
        if not isinstance(reason, str) or not reason.strip():
            return self._refuse(
                op,
                Refusal(Reason.REASON_REQUIRED, "an archive needs a reason"),
                note_id=note_id,
                source=source,
            )
        why = clean_reason(reason)
        with self._writing() as snap:
            note = self._live_note(snap, op, note_id, source=source)
            if isinstance(note, WriteResult):
                return note
            now = self._now()
            if note.status == "ratified":
                request = _entry(now, "model", "archive_request", why, source)
                kept = replace(
                    note, archive_proposed=why, updated=now, changelog=[*note.changelog, request]
                )
                self._write(kept, old_path=note.path)
                self._reindex([note.id])
                result = self._done(op, kept, source=source, by="model")
                result.kept_live = True
                result.detail = "ratified note kept live until the user archives or ratifies it"
                return result
            archived = self._move_to_archive(note, by="model", why=why, source=source)
            return self._done(op, archived, source=source, by="model")

    # ------------------------------------------------------------------- user side

    @_guard("edit")
    def edit(
        self,
        note_id: str,
        *,
        title: str | None = None,
        body: str | None = None,
        tags: Iterable[str] | str | None = None,
        kind: str | None = None,
        verify_by: Any = None,
        via: str = "dashboard",
    ) -> WriteResult:
        """The user's edit: lands as a ratified revision (caps and secrets still apply)."""
        _check_via(via)
        op = "edit"
        with self._writing() as snap:
            note = self._live_note(snap, op, note_id, via=via, by="user")
            if isinstance(note, WriteResult):
                return note
            content = self._merged_content(note, title, body, tags, kind, verify_by)
            if isinstance(content, Refusal):
                return self._refuse(
                    op,
                    content,
                    note_id=note_id,
                    kind=note.kind,
                    scope=note.scope,
                    via=via,
                    by="user",
                )
            return self._revise(note, content, by="user", source=via, why=None, op=op)

    @_guard("ratify")
    def ratify(self, note_id: str, *, via: str = "dashboard") -> WriteResult:
        """The user confirms a note: ratified, and any model archive request is dropped."""
        _check_via(via)
        op = "ratify"
        with self._writing() as snap:
            note = self._live_note(snap, op, note_id, via=via, by="user")
            if isinstance(note, WriteResult):
                return note
            if note.status == "ratified" and note.archive_proposed is None:
                return self._done(op, note, via=via, by="user", wrote=False)
            now = self._now()
            ratified = replace(
                note,
                status="ratified",
                archive_proposed=None,
                updated=now,
                changelog=[*note.changelog, _entry(now, "user", "ratify", None, via)],
            )
            self._write(ratified, old_path=note.path)
            self._reindex([note.id])
            return self._done(op, ratified, via=via, by="user")

    @_guard("split")
    def split(self, note_id: str, revision: int, *, via: str = "cli") -> WriteResult:
        """Restore revision ``revision`` of a note as a note of its own: the way back from
        a merge that joined two facts. The new note is provisional, in the old one's scope,
        and never deduped (it would merge straight back)."""
        _check_via(via)
        op = "split"
        with self._writing() as snap:
            note = self._live_note(snap, op, note_id, via=via, by="user")
            if isinstance(note, WriteResult):
                return note
            path = self.layout.revision_path(note_id, revision)
            if not 1 <= revision < note.revision or not path.exists():
                return self._refuse(op, Refusal(Reason.NOT_FOUND, f"{note_id} has no revision "
                                                f"{revision}"), note_id=note_id, via=via,
                                    by="user")
            old = parse(path.read_text(encoding="utf-8"), path)
            now = self._now()
            restored = replace(
                old,
                id=_new_id(snap.notes),
                status="provisional",
                revision=1,
                created=now,
                updated=now,
                archived_at=None,
                archive_proposed=None,
                path=None,
                changelog=[_entry(now, "user", "split", f"{note_id} revision {revision}", via)],
            )
            self._write(restored)
            self._reindex([restored.id])
            return self._done(op, restored, via=via, by="user")

    @_guard("reject")
    def reject(
        self, note_id: str, *, reason: str | None = None, via: str = "dashboard"
    ) -> WriteResult:
        """The user turns down a provisional note: it goes to the archive."""
        _check_via(via)
        op = "reject"
        with self._writing() as snap:
            note = self._live_note(snap, op, note_id, via=via, by="user")
            if isinstance(note, WriteResult):
                return note
            if note.status == "ratified":
                return self._refuse(
                    op,
                    Refusal(Reason.ALREADY_RATIFIED, "archive a ratified note instead"),
                    note_id=note_id,
                    kind=note.kind,
                    scope=note.scope,
                    via=via,
                    by="user",
                )
            why = clean_reason(reason) if reason else "rejected by the user"
            archived = self._move_to_archive(note, by="user", why=why, source=via, what="reject")
            return self._done(op, archived, via=via, by="user")

    @_guard("pin")
    def pin(self, note_id: str, pinned: bool = True, *, via: str = "dashboard") -> WriteResult:
        """Pin (or unpin) a note. Only ratified rules can be pinned."""
        _check_via(via)
        op = "pin" if pinned else "unpin"
        with self._writing() as snap:
            note = self._live_note(snap, op, note_id, via=via, by="user")
            if isinstance(note, WriteResult):
                return note
            if pinned and note.kind not in ("rule", "ruling"):
                return self._refuse(
                    op,
                    Refusal(Reason.NOT_A_RULE, "only rules can be pinned"),
                    note_id=note_id,
                    kind=note.kind,
                    scope=note.scope,
                    via=via,
                    by="user",
                )
            if pinned and note.status != "ratified":
                return self._refuse(
                    op,
                    Refusal(Reason.NOT_RATIFIED, "ratify the rule before pinning it"),
                    note_id=note_id,
                    kind=note.kind,
                    scope=note.scope,
                    via=via,
                    by="user",
                )
            if note.pinned == pinned:
                return self._done(op, note, via=via, by="user", wrote=False)
            now = self._now()
            changed = replace(
                note,
                pinned=pinned,
                updated=now,
                changelog=[*note.changelog, _entry(now, "user", op, None, via)],
            )
            self._write(changed, old_path=note.path)
            self._reindex([note.id])
            return self._done(op, changed, via=via, by="user")

    @_guard("user_archive")
    def user_archive(
        self, note_id: str, reason: str | None = None, *, via: str = "dashboard"
    ) -> WriteResult:
        """The user archives a note, ratified or not (deleted 30 days later)."""
        _check_via(via)
        op = "user_archive"
        with self._writing() as snap:
            note = self._live_note(snap, op, note_id, via=via, by="user")
            if isinstance(note, WriteResult):
                return note
            why = clean_reason(reason) if reason else "archived by the user"
            archived = self._move_to_archive(note, by="user", why=why, source=via)
            return self._done(op, archived, via=via, by="user")

    @_guard("delete")
    def delete(self, note_id: str, *, via: str = "dashboard") -> WriteResult:
        """Delete a note (live or archived), its revisions and its usage, for good."""
        _check_via(via)
        op = "delete"
        with self._writing() as snap:
            note = snap.notes.get(note_id)
            if note is None:
                return self._refuse(
                    op,
                    Refusal(Reason.NOT_FOUND, f"no note {note_id}"),
                    note_id=note_id,
                    via=via,
                    by="user",
                )
            self._erase(note)
            self._reindex([note_id])
            return self._done(op, note, via=via, by="user")

    @_guard("delete_all")
    def delete_all(self, *, via: str = "dashboard") -> WriteResult:
        """Delete the user's whole tree: every note, revision, archive, usage, index."""
        _check_via(via)
        op = "delete_all"
        with self._lock:
            count = len(self._load().notes)
            if self.layout.user_dir.exists():
                shutil.rmtree(self.layout.user_dir)
            self._index.wipe()
            self._parsed.clear()
            ensure_dir(self.layout.user_dir)
            self._journal(op, ok=True, via=via, by="user", counts={"notes": count})
            return WriteResult(True, None, None, op, count=count)

    # --------------------------------------------------------------------- reading

    @contextmanager
    def one_scan(self) -> Iterator[None]:
        """Reads (get, list, search) in this thread inside the block share one scan of
        the files: a request that reads several times pays for one. Not for writes."""
        if getattr(self._pinned, "snapshot", None) is not None:
            yield  # nested: the outer block's scan stands
            return
        self._pinned.snapshot = self._load()
        try:
            yield
        finally:
            self._pinned.snapshot = None

    def _read_snapshot(self) -> _Snapshot:
        return getattr(self._pinned, "snapshot", None) or self._load()

    def get(self, note_id: str) -> Note | None:
        """A note by id, live or archived."""
        note = self._read_snapshot().notes.get(note_id)
        return _copy(note) if note is not None else None

    def list(
        self,
        *,
        scope: str | None = None,
        kind: str | None = None,
        status: str | None = None,
        project: str | os.PathLike[str] | None = None,
        session: str | None = None,
        state: str = "live",
        include_stale: bool = True,
    ) -> list[Note]:
        """Notes matching every given filter, newest update first.

        ``include_stale=False`` drops notes past ``verify_by`` (never injected).
        """
        filters = _filters(scope, kind, status, project, session, state)
        now = self._now()
        notes = [
            n
            for n in self._read_snapshot().notes.values()
            if _matches(n, filters) and (include_stale or not n.is_stale(now))
        ]
        notes.sort(key=lambda n: n.updated, reverse=True)
        return [_copy(n) for n in notes]

    def search(
        self,
        query: str,
        *,
        scope: str | None = None,
        kind: str | None = None,
        status: str | None = None,
        project: str | os.PathLike[str] | None = None,
        session: str | None = None,
        state: str = "live",
        limit: int = 10,
        include_stale: bool = True,
    ) -> list[tuple[Note, float]]:
        """BM25 over title, tags and body: ``(note, score)`` pairs, best first.

        ``include_stale=False`` drops notes past ``verify_by`` (never injected).
        """
        filters = _filters(scope, kind, status, project, session, state)
        now = self._now()
        snap = self._read_snapshot()
        if not self._index.is_fresh(snap.fingerprint):
            with self._lock:
                snap = self._fresh_snapshot()
        index_filters = {k: v for k, v in filters.items() if k != "state" or v != "all"}
        hits = self._index.search(query, index_filters, limit=max(limit, 0) * 2 + 5)
        out: list[tuple[Note, float]] = []
        for note_id, score in hits:
            note = snap.notes.get(note_id)
            # The files are the truth: check the filters again on the note itself.
            if note is None or not _matches(note, filters):
                continue
            if include_stale or not note.is_stale(now):
                out.append((_copy(note), score))
        return out[:limit]

    def dedupe_match(
        self,
        *,
        title: str,
        body: str = "",
        tags: Iterable[str] | str | None = None,
        scope: str = "user",
        project: str | os.PathLike[str] | None = None,
        session: str | None = None,
    ) -> tuple[Note, float] | None:
        """The live note in the scope that this text covers best, with its normalised BM25
        ratio (see ``conductor.dedupe``). For tuning and for the dashboard; no write."""
        where = resolve_scope(scope, project, session)
        if isinstance(where, Refusal):
            raise ValueError(where.detail)
        with self._lock:
            snap = self._fresh_snapshot()
        probe = Note(
            id="", title=title, kind="reference", scope=scope, body=body, tags=clean_tags(tags)
        )
        return dedupe.closest(
            self._index, snap.notes, note_text(probe), _scope_filters(where.scope, where.key)
        )

    # ----------------------------------------------------------------------- usage

    def record_injection(self, note_ids: Iterable[str], request_id: str | None = None) -> int:
        """Count that these notes went into a request; returns how many were counted."""
        ids = [i for i in dict.fromkeys(note_ids)]
        with self._lock:
            known = self._load().notes
            counted = [i for i in ids if i in known]
            if counted:
                self._usage.record(counted, self._now())
            self._journal("inject", ok=True, ids=counted, request_id=request_id)
        return len(counted)

    def usage(self, note_id: str, now: datetime | None = None) -> dict[str, Any]:
        """``{"total": n, "last": iso or None, "uses_7d": n}`` for one note."""
        entry = self._usage.load().get(note_id) or {}
        return {
            "total": int(entry.get("total", 0)),
            "last": entry.get("last"),
            "uses_7d": UsageBook.uses_within(entry, now or self._now(), 7),
        }

    def uses_in_days(self, note_id: str, days: int = 7, now: datetime | None = None) -> int:
        """How many requests this note went into in the last ``days`` days."""
        entry = self._usage.load().get(note_id)
        return UsageBook.uses_within(entry, now or self._now(), days)

    # ---------------------------------------------------------------------- upkeep

    def regenerate_index(self, now: datetime | None = None) -> Path:
        """Write ``INDEX.md``: one line per live note."""
        with self._lock:
            notes = [n for n in self._load().notes.values() if not n.archived]
            usage = self._usage.load()
            moment = now or self._now()
            text = render_index_md(self.user, notes, usage, moment)
            atomic_write(self.layout.index_md, text)
        return self.layout.index_md

    def purge_archives(self, now: datetime | None = None) -> int:
        """Delete archived notes older than ``caps.archive_days``; returns how many."""
        moment = now or self._now()
        horizon = moment - timedelta(days=self.caps.archive_days)
        with self._writing() as snap:
            expired = [
                n
                for n in snap.notes.values()
                if n.archived_at is not None and n.archived_at < horizon
            ]
            for note in expired:
                self._erase(note)
            if expired:
                self._reindex([n.id for n in expired])
            self._prune_empty_dirs(self.layout.archive_dir)
        return len(expired)

    def mark_stale(self, now: datetime | None = None) -> int:
        """Mark live notes past their ``verify_by`` stale; returns how many were marked."""
        moment = now or self._now()
        with self._writing() as snap:
            due = [
                n
                for n in snap.notes.values()
                if not n.archived and not n.stale and n.is_stale(moment)
            ]
            for note in due:
                marked = replace(
                    note,
                    stale=True,
                    updated=moment,
                    changelog=[
                        *note.changelog,
                        _entry(moment, "nightly", "mark_stale", "past verify_by", None),
                    ],
                )
                self._write(marked, old_path=note.path)
            if due:
                self._reindex([n.id for n in due])
        return len(due)

    def clean_leftovers(self, now: datetime | None = None) -> int:
        """Remove temp files a crash left behind (older than an hour) and stale copies."""
        moment = (now or self._now()).timestamp()
        removed = 0
        with self._writing():  # also removes older duplicate copies of a note
            for dirpath, _dirs, files in os.walk(self.layout.user_dir):
                for name in files:
                    if not (name.startswith(".") and name.endswith(".tmp")):
                        continue
                    path = Path(dirpath) / name
                    try:
                        old = moment - path.stat().st_mtime > TEMP_FILE_AGE.total_seconds()
                    except FileNotFoundError:
                        continue
                    if old and remove_file(path):
                        removed += 1
            known = self._load().notes
            stale_usage = [i for i in self._usage.load() if i not in known]
            if stale_usage:
                self._usage.forget(stale_usage)
        return removed

    def export_zip(self, dest: Path | str, *, via: str = "cli") -> Path:
        """Write a zip of the user's tree to ``dest`` (mode 0600); returns its path."""
        _check_via(via)
        dest = Path(os.path.abspath(Path(dest).expanduser()))
        if dest.is_relative_to(self.layout.user_dir):
            raise ValueError("the export cannot be written inside the tree it exports")
        with self._lock:
            export_tree(self.layout.user_dir, self.user, dest)
        self._journal("export", ok=True, via=via, by="user")
        return dest

    def log_nightly(self, counts: dict[str, int]) -> None:
        self._journal("nightly", ok=True, by="nightly", counts=counts)

    # ------------------------------------------------------------------- internals

    @contextmanager
    def _writing(self) -> Iterator[_Snapshot]:
        """Hold the user's lock over a fresh snapshot with an index that matches it."""
        with self._lock:
            yield self._fresh_snapshot()

    def _fresh_snapshot(self) -> _Snapshot:
        snap = self._load()
        if snap.stale_copies:
            for path in snap.stale_copies:
                remove_file(path)
            snap = self._load()
        if not self._index.is_fresh(snap.fingerprint):
            try:
                self._index.rebuild(snap.notes.values(), snap.fingerprint)
            except (OSError, ValueError):
                log.exception("rebuilding the search index failed")
        return snap

    def _reindex(self, ids: Iterable[str]) -> None:
        """Bring the index up to date with a write that touched ``ids``."""
        snap = self._load()
        upserts = [snap.notes[i] for i in ids if i in snap.notes]
        removed = [i for i in ids if i not in snap.notes]
        try:
            self._index.apply(upserts, removed, snap.fingerprint)
        except (OSError, ValueError):
            # The write stands; the index is derived and is rebuilt when next used.
            log.exception("updating the search index failed")
            self._index.wipe()

    def _load(self) -> _Snapshot:
        """Scan the tree; parse only files changed since the last scan.

        Runs on every read (the files are the truth), so it works on path strings:
        pathlib objects made it several times slower on a 50-note store.
        """
        user_dir = os.fspath(self.layout.user_dir)
        skip = len(user_dir) + 1  # path[skip:] is the path relative to the user folder
        digest = hashlib.sha256()
        best: dict[str, Note] = {}
        losers: list[Path] = []
        seen: set[str] = set()
        for path, archived, st in self._scan(user_dir):
            signature = (st.st_ino, st.st_mtime_ns, st.st_size)
            digest.update(f"{path[skip:]}\0{signature}\n".encode())
            seen.add(path)
            note = self._parse_cached(path, signature)
            if note is None:
                continue
            if archived and note.archived_at is None:
                # Moved into the archive without its metadata: date it by the file.
                note.archived_at = datetime.fromtimestamp(st.st_mtime).astimezone()
            elif not archived:
                note.archived_at = None
            current = best.get(note.id)
            if current is None:
                best[note.id] = note
                continue
            newer = _newest(current, note)
            older = note if newer is current else current
            best[note.id] = newer
            if older.path is not None:
                losers.append(older.path)
        for path in [p for p in self._parsed if p not in seen]:
            del self._parsed[path]
        return _Snapshot(best, losers, digest.hexdigest())

    @staticmethod
    def _scan(user_dir: str) -> Iterator[tuple[str, bool, os.stat_result]]:
        """Every note file under the user folder: (path, archived, stat), in a fixed order."""
        for top, archived in _TREES:
            for dirpath, dirnames, files in os.walk(os.path.join(user_dir, top)):
                dirnames.sort()
                for name in sorted(files):
                    if name.startswith(".") or not name.endswith(".md"):
                        continue
                    path = os.path.join(dirpath, name)
                    try:
                        yield path, archived, os.stat(path)
                    except FileNotFoundError:
                        continue

    def _parse_cached(self, path: str, signature: tuple[int, int, int]) -> Note | None:
        cached = self._parsed.get(path)
        if cached is not None and cached[0] == signature:
            return cached[1]
        file = Path(path)
        try:
            note = parse(file.read_text(encoding="utf-8"), file)
        except FileNotFoundError:
            return None
        except (NoteFormatError, UnicodeDecodeError) as exc:
            log.warning("skipping unreadable note file %s: %s", file, exc)
            return None
        self._parsed[path] = (signature, note)
        return note

    def _merged_content(
        self,
        note: Note,
        title: str | None,
        body: str | None,
        tags: Iterable[str] | str | None,
        kind: str | None,
        verify_by: Any,
    ) -> Content | Refusal:
        return check_content(
            title=note.title if title is None else title,
            body=note.body if body is None else body,
            tags=note.tags if tags is None else tags,
            kind=note.kind if kind is None else kind,
            verify_by=note.verify_by if verify_by is None else verify_by,
            caps=self.caps,
        )

    def _over_cap(self, snap: _Snapshot, session: str | None) -> Refusal | None:
        if session is not None:
            # Notes this conversation created, live or archived: archiving does not make
            # room, so a runaway turn cannot cycle notes through the archive.
            made = sum(1 for n in snap.notes.values() if n.origin_session == session)
            if made >= self.caps.session_notes:
                return Refusal(
                    Reason.CAP_SESSION,
                    f"this session already wrote {made} notes (max {self.caps.session_notes})",
                )
        live = sum(1 for n in snap.notes.values() if not n.archived)
        if live >= self.caps.user_notes:
            return Refusal(
                Reason.CAP_USER, f"{live} live notes already (max {self.caps.user_notes})"
            )
        return None

    def _revise(
        self,
        note: Note,
        content: Content,
        *,
        by: str,
        source: str,
        why: str | None,
        op: str,
        revised_existing: bool = False,
    ) -> WriteResult:
        """Write a new revision of ``note``; the earlier text goes to ``revisions/``."""
        unchanged = (
            content.title == note.title
            and content.body == note.body
            and content.tags == note.tags
            and content.kind == note.kind
            and content.verify_by == note.verify_by
        )
        status = "ratified" if by == "user" else "provisional"
        if unchanged and (by == "model" or note.status == status):
            return self._done(
                op,
                note,
                content=content,
                source=source,
                by=by,
                wrote=False,
                revised_existing=revised_existing,
            )
        now = self._now()
        atomic_write(self.layout.revision_path(note.id, note.revision), render(note))
        revised = replace(
            note,
            title=content.title,
            body=content.body,
            tags=content.tags,
            kind=content.kind,
            verify_by=content.verify_by,
            stale=note.stale and content.verify_by == note.verify_by,
            status=status,
            archive_proposed=None if by == "user" else note.archive_proposed,
            revision=note.revision + 1,
            updated=now,
            changelog=[
                *note.changelog,
                # An add that restated this note says so: the user sees a merge, not a
                # silent change.
                _entry(now, by, "merge" if revised_existing
                       else "edit" if by == "user" else "revise", why, source),
            ],
        )
        self._write(revised, old_path=note.path)
        self._reindex([note.id])
        return self._done(
            op, revised, content=content, source=source, by=by, revised_existing=revised_existing
        )

    def _move_to_archive(
        self, note: Note, *, by: str, why: str, source: str, what: str = "archive"
    ) -> Note:
        now = self._now()
        archived = replace(
            note,
            archived_at=now,
            archive_reason=why,
            archive_proposed=None,
            updated=now,
            changelog=[*note.changelog, _entry(now, by, what, why, source)],
        )
        self._write(archived, old_path=note.path)
        self._reindex([note.id])
        return archived

    def _erase(self, note: Note) -> None:
        if note.path is not None:
            remove_file(note.path)
        shutil.rmtree(self.layout.revisions_dir / note.id, ignore_errors=True)
        self._usage.forget([note.id])

    def _path_for(self, note: Note) -> Path:
        live_dir = self.layout.scope_dir(note.scope, note.scope_key)
        if note.archived_at is None:
            return live_dir / note.file_name()
        month = note.archived_at.strftime("%Y-%m")
        relative = live_dir.relative_to(self.layout.user_dir)
        return self.layout.archive_dir / month / relative / note.file_name()

    def _write(self, note: Note, old_path: Path | None = None) -> None:
        """Write the note's file; then remove its old file if the name or folder changed.

        A crash between the two leaves two whole copies; the newer one wins on load.
        """
        target = self._path_for(note)
        atomic_write(target, render(note))
        if old_path is not None and old_path != target:
            remove_file(old_path)
        note.path = target

    def _prune_empty_dirs(self, top: Path) -> None:
        for dirpath, _dirs, _files in sorted(os.walk(top), key=lambda w: -len(w[0])):
            if Path(dirpath) != top:
                try:
                    os.rmdir(dirpath)
                except OSError:
                    pass

    def _live_note(self, snap: _Snapshot, op: str, note_id: str, **who: str) -> Note | WriteResult:
        """The live note ``note_id``, or the journaled refusal when it is missing or archived.
        ``who`` is ``source=`` for a model operation, ``via=`` and ``by=`` for the user's."""
        note = snap.notes.get(note_id)
        missing = _missing(note, note_id)
        if missing is not None:
            return self._refuse(op, missing, note_id=note_id, **who)
        assert note is not None
        return note

    def _refuse(
        self,
        op: str,
        refusal: Refusal,
        *,
        note_id: str | None = None,
        kind: str | None = None,
        scope: str | None = None,
        source: str | None = None,
        via: str | None = None,
        by: str = "model",
    ) -> WriteResult:
        # Unknown kinds and scopes came from model text: they are not journaled.
        self._journal(
            op,
            ok=False,
            reason=refusal.reason,
            id=note_id,
            kind=kind if kind in KINDS else None,
            scope=scope if scope in SCOPES else None,
            source=source,
            via=via,
            by=by,
        )
        return WriteResult(False, refusal.reason, None, op, detail=refusal.detail)

    def _done(
        self,
        op: str,
        note: Note,
        *,
        content: Content | None = None,
        source: str | None = None,
        via: str | None = None,
        by: str,
        wrote: bool = True,
        revised_existing: bool = False,
    ) -> WriteResult:
        counts = dict(content.redaction.counts) if content is not None else {}
        self._journal(
            op,
            ok=True,
            id=note.id,
            kind=note.kind,
            scope=note.scope,
            status=note.status,
            revision=note.revision,
            source=source,
            via=via,
            by=by,
            revised_existing=revised_existing or None,
            redactions=counts or None,
            counts=None if wrote else {"unchanged": 1},
        )
        return WriteResult(
            True,
            None,
            _copy(note),
            op,
            redactions=sum(counts.values()),
            revised_existing=revised_existing,
            redaction_counts=counts,
        )

    def _journal(self, op: str, **fields: Any) -> None:
        entry = {k: v for k, v in fields.items() if v is not None}
        self._journal_file.append(user=self.user, op=op, **entry)


# ------------------------------------------------------------------------- helpers


def _check_source(source: str) -> None:
    if source not in SOURCES:
        raise ValueError(f"source must be one of {SOURCES}, not {source!r}")


def _check_via(via: str) -> None:
    if via not in USER_VIAS:
        raise ValueError(f"via must be one of {USER_VIAS}, not {via!r}")


def _missing(note: Note | None, note_id: str) -> Refusal | None:
    if note is None:
        return Refusal(Reason.NOT_FOUND, f"no note {note_id}")
    if note.archived:
        return Refusal(Reason.ARCHIVED, f"note {note_id} is archived")
    return None


def _entry(when: datetime, by: str, what: str, why: str | None, source: str | None) -> dict:
    return {"when": format_time(when), "by": by, "what": what, "why": why, "source": source}


def _new_id(existing: dict[str, Note]) -> str:
    while True:
        candidate = os.urandom(5).hex()
        if candidate not in existing:
            return candidate


def _newest(a: Note, b: Note) -> Note:
    """The newer of two copies of one note (every write appends to the changelog)."""
    return b if (b.generation, b.archived) > (a.generation, a.archived) else a


def _copy(note: Note) -> Note:
    """A copy callers may change without touching the store's cache."""
    # copy.copy, not dataclasses.replace: every read copies every note it returns.
    out = copy.copy(note)
    out.tags = list(note.tags)
    out.changelog = [dict(e) for e in note.changelog]
    return out


def _as_note(content: Content) -> Note:
    return Note(
        id="",
        title=content.title,
        kind=content.kind,
        scope="user",
        body=content.body,
        tags=content.tags,
    )


def _scope_filters(scope: str, key: str | None) -> dict[str, str | None]:
    return {
        "scope": scope,
        "project": key if scope == "project" else None,
        "session": key if scope == "session" else None,
    }


def _project_filter(project: str | os.PathLike[str] | None) -> str | None:
    """A project filter is a key (``name-1a2b3c4d``) or a path."""
    if project is None:
        return None
    text = os.fspath(project)
    if "/" not in text and len(text) > 9 and text[-9] == "-":
        try:
            int(text[-8:], 16)
            return text
        except ValueError:
            pass
    return project_key(text)[0]


def _filters(
    scope: str | None,
    kind: str | None,
    status: str | None,
    project: str | os.PathLike[str] | None,
    session: str | None,
    state: str,
) -> dict[str, str | None]:
    if state not in STATES:
        raise ValueError(f"state must be one of {STATES}")
    return {
        "scope": scope,
        "kind": kind,
        "status": status,
        "project": _project_filter(project),
        "session": session,
        "state": state,
    }


def _matches(note: Note, filters: dict[str, str | None]) -> bool:
    state = filters.get("state") or "live"
    if state == "live" and note.archived or state == "archived" and not note.archived:
        return False
    for name in ("scope", "kind", "status", "project", "session"):
        wanted = filters.get(name)
        if wanted is not None and getattr(note, name) != wanted:
            return False
    return True
