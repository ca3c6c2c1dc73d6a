"""The user's writes (dashboard, CLI, route): edit, ratify, split, reject, pin, delete."""

from __future__ import annotations

import shutil
from collections.abc import Iterable
from dataclasses import replace
from typing import Any

from conductor.notes.core import StoreCore, _guard
from conductor.notes.helpers import _check_via, _entry, _new_id
from conductor.notes.note_format import parse
from conductor.notes.rules import Reason, Refusal, WriteResult, clean_reason
from conductor.storage.atomic import ensure_dir


class UserWrites(StoreCore):
    """The user side, each write named by ``via=``: an edit lands as a ratified revision."""

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
            self._rewrite(note, ratified)
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
            self._cache.reindex([restored.id])
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
            self._rewrite(note, changed)
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
            self._cache.reindex([note_id])
            return self._done(op, note, via=via, by="user")

    @_guard("delete_all")
    def delete_all(self, *, via: str = "dashboard") -> WriteResult:
        """Delete the user's whole tree: every note, revision, archive, usage, index."""
        _check_via(via)
        op = "delete_all"
        with self._lock:
            count = len(self._cache.load().notes)
            if self.layout.user_dir.exists():
                shutil.rmtree(self.layout.user_dir)
            self._index.wipe()
            self._cache.forget()
            ensure_dir(self.layout.user_dir)
            self._journal(op, ok=True, via=via, by="user", counts={"notes": count})
            return WriteResult(True, None, None, op, count=count)
