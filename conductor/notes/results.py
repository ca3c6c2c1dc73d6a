"""What a write returns: ``WriteResult``, refused or done, never raised."""

from __future__ import annotations

from dataclasses import dataclass, field

from conductor.notes.note_format import Note


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
