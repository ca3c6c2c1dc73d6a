"""The store's state and the write machinery its operations share: lock, files, journal."""

from __future__ import annotations

import functools
import logging
import os
import re
import shutil
import threading
from collections.abc import Callable, Hashable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, ParamSpec

from conductor.notes.helpers import _copy, _entry, _missing
from conductor.notes.note_format import KINDS, SCOPES, Note, render, utc_now
from conductor.notes.rules import Content, NoteCaps, Reason, Refusal, WriteResult, check_content
from conductor.notes.snapshot import NoteCache, _Snapshot
from conductor.notes.usage import UsageBook
from conductor.search.notes_bm25 import NoteIndex
from conductor.storage.atomic import DIR_MODE, FileLock, atomic_write, ensure_dir, remove_file
from conductor.storage.fence import FenceRefused, fenced
from conductor.storage.journal import Journal
from conductor.storage.paths import Layout, StoreRootError, git_work_tree_of, valid_user

log = logging.getLogger(__name__)

P = ParamSpec("P")
NOTE_ID = re.compile(r"[0-9a-z_-]{1,40}")  # the shapes ids have (new ones: 10 hex digits)


class _Refused(Exception):
    """A write refused on the way in (its result journaled already): `_guard` returns it."""

    def __init__(self, result: WriteResult) -> None:
        super().__init__(result.reason)
        self.result = result


def _guard(op: str) -> Callable[[Callable[P, WriteResult]], Callable[P, WriteResult]]:
    """Every write's frame: a refusal raised on the way in (`_Refused`, from `_live_note`)
    becomes its result, and an OSError inside the write an ``io_error`` result
    (journaled, logged)."""

    def wrap(method: Callable[P, WriteResult]) -> Callable[P, WriteResult]:
        @functools.wraps(method)
        def run(*args: P.args, **kwargs: P.kwargs) -> WriteResult:
            try:
                return method(*args, **kwargs)
            except _Refused as refused:
                return refused.result
            except FenceRefused as exc:  # replicas: not this replica's write (fence.py)
                store = args[0]
                assert isinstance(store, StoreCore)
                log.info("note store %s refused: %s", op, exc.reason)
                return WriteResult(False, exc.reason, None, op, detail=str(exc),
                                   retry_after=exc.retry_after, holder=exc.holder)
            except OSError as exc:
                store = args[0]
                assert isinstance(store, StoreCore)
                # the error's words only: its file name would carry the note's title
                log.warning("note store %s failed: %s", op, exc.strerror or type(exc).__name__)
                try:
                    store._journal(op, ok=False, reason=Reason.IO_ERROR)
                except OSError:
                    pass
                return WriteResult(False, Reason.IO_ERROR, None, op,
                                   detail=exc.strerror or type(exc).__name__)

        return run

    return wrap


class StoreCore:
    """One user's tree, lock, index, usage and journal, and the steps every write takes:
    load under the lock, write a revision, move to the archive, journal the result."""

    def __init__(
        self,
        root: Path | str,
        user: str,
        *,
        clock: Callable[[], datetime] = utc_now,
        caps: NoteCaps | None = None,
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
        self.caps = caps or NoteCaps()
        self.layout = Layout(root, user)
        for folder in (root, root / "notes", self.layout.user_dir):
            ensure_dir(folder)
            os.chmod(folder, DIR_MODE)
        self._lock = FileLock(self.layout.lock_path)
        self._journal_file = Journal(self.layout.journal_path, clock)
        self._usage = UsageBook(self.layout.usage_json)
        self._index = NoteIndex(self.layout.index_dir)
        self._cache = NoteCache(self.layout.user_dir, self._index)
        self._pinned = threading.local()  # .snapshot: the scan reads share inside one_scan()
        # key -> (the store's stamp, valid until, value): NoteReads.while_unchanged
        self._derived: dict[Hashable, tuple[tuple, datetime | None, Any]] = {}
        # Replicas (conductor/memory/lease.py): the user's fencing token, taken (or the
        # lease acquired) at each write; None on one machine, where no write is fenced.
        self.fence: Callable[[], int] | None = None
        self._token = threading.local()  # .value: the token of the write in progress

    @property
    def journal(self) -> Journal:
        return self._journal_file

    def _now(self) -> datetime:
        """The injected clock's time in UTC (archive months and stamps are UTC)."""
        return self.clock().astimezone(UTC)

    @contextmanager
    def _writing(self) -> Iterator[_Snapshot]:
        """Hold the user's lock over a fresh snapshot with an index that matches it."""
        with self._lock:
            if self.fence is not None and not getattr(self._token, "value", None):
                self._token.value = self.fence()  # LeaseBusy when another replica holds it
                try:
                    # the record the user's layers and history share (fence.py)
                    with fenced(self.root, self.user, self._token.value):
                        yield self._cache.fresh()
                finally:
                    self._token.value = None
                return
            yield self._cache.fresh()

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
        atomic_write(self.layout.revision_path(note.id, note.revision), render(note),
                     kind="revision")
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
        self._rewrite(note, revised)
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
        return self._rewrite(note, archived)

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
        kind = "note" if note.archived_at is None else "archive"  # the crash tests' name
        atomic_write(target, render(note), kind=kind)
        if old_path is not None and old_path != target:
            remove_file(old_path, kind=kind)
        note.path = target

    def _live_note(self, snap: _Snapshot, op: str, note_id: str, **who: str) -> Note:
        """The live note ``note_id``; when it is missing or archived, the refusal is
        journaled and raised as `_Refused`, which the write's `_guard` returns: the one
        preamble of every change to a note. ``who`` is ``source=`` for a model operation,
        ``via=`` and ``by=`` for the user's."""
        note = snap.notes.get(note_id)
        missing = _missing(note, note_id)
        if missing is not None:
            raise _Refused(self._refuse(op, missing, note_id=note_id, **who))
        assert note is not None
        return note

    def _rewrite(self, old: Note, new: Note) -> Note:
        """Replace a note's file with its changed form, and the index's entry. The change
        is stated (as nano-vllm's block manager states its own at every change): the same
        note, its changelog one entry or more longer, its revision the same or the next."""
        assert new.id == old.id, "a rewrite keeps the note's id"
        assert len(new.changelog) > len(old.changelog), "every change is in the changelog"
        assert new.revision in (old.revision, old.revision + 1), "revisions go one at a time"
        self._write(new, old_path=old.path)
        self._cache.reindex([old.id])
        return new

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
        # Unknown kinds and scopes came from model text: they are not journaled; nor is an
        # id of no note's shape (a caller's text, a hostile path: not a code).
        self._journal(
            op,
            ok=False,
            reason=refusal.reason,
            id=note_id if note_id is not None and NOTE_ID.fullmatch(note_id) else None,
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
        token = getattr(self._token, "value", None)
        if token:  # the write's fencing token, so the journal shows who wrote (replicas)
            entry["fence"] = token
        self._journal_file.append(user=self.user, op=op, **entry)
