"""The model's writes: ``add``, ``update`` and ``archive``; it only writes provisional notes."""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import replace
from typing import Any

from conductor.notes import dedupe
from conductor.notes.core import StoreCore, _guard
from conductor.notes.filters import _scope_filters
from conductor.notes.helpers import _as_note, _check_source, _entry, _new_id
from conductor.notes.note_format import Note
from conductor.notes.rules import (
    Reason,
    Refusal,
    WriteResult,
    check_content,
    clean_reason,
    needs_user_message,
    resolve_scope,
)
from conductor.notes.snapshot import _Snapshot
from conductor.search.notes_bm25 import note_text

_RULE_DETAIL = "a rule about the user needs the user's own message in the turn"


class ModelWrites(StoreCore):
    """The model side: each write names its ``source`` and, for ``add``/``update``, whether
    the turn has the user's own message."""

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
            self._cache.reindex([note.id])
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
            now = self._now()
            if note.status == "ratified":
                request = _entry(now, "model", "archive_request", why, source)
                kept = replace(
                    note, archive_proposed=why, updated=now, changelog=[*note.changelog, request]
                )
                self._rewrite(note, kept)
                result = self._done(op, kept, source=source, by="model")
                result.kept_live = True
                result.detail = "ratified note kept live until the user archives or ratifies it"
                return result
            archived = self._move_to_archive(note, by="model", why=why, source=source)
            return self._done(op, archived, source=source, by="model")

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
