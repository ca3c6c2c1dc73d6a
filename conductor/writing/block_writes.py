"""What a parsed memory block does to the notes store, for inline blocks and the writer."""

from __future__ import annotations

from conductor.notes import NoteStore, WriteResult
from conductor.writing.blocks import BlockRequest


def write_block(store: NoteStore, request: BlockRequest, *, source: str, session: str,
                project: str | None = None, has_user_message: bool = False) -> WriteResult:
    """Apply one block's add, update or archive under the store's rules."""
    if request.op == "add":
        return store.add(title=request.title or "", body=request.body, kind=request.kind,
                         scope=request.scope, tags=list(request.tags), project=project,
                         session=session, source=source, has_user_message=has_user_message)
    if request.op == "update":
        return store.update(request.note_id, title=request.title, body=request.body or None,
                            tags=list(request.tags) or None, kind=request.kind, source=source,
                            has_user_message=has_user_message)
    return store.archive(request.note_id, request.reason or "", source=source,
                         has_user_message=has_user_message)
