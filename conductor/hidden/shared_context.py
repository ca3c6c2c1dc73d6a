"""The shared memory context: the card and the index as one hidden message right after the
system prompt and the tool definitions, before the first user message.

Its text depends only on the user, the project and what the index shows: no session, no
clock, no usage counts. Every session that opens with the same system prompt and tools
therefore starts with the same token ids, and vLLM's prefix cache serves the card and the
index to the second session without prefilling them again. What belongs to one session
(the memory-routes token, the session's own notes) goes in the short *session tail* after
the first user message instead.

The version is a hash of the text: it changes exactly when what the context shows
changes (a write, an archive, a ratify or pin, the nightly job), which is when the server
prewarms the prefixes that carry it.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from dataclasses import dataclass

from conductor.hidden.card import memory_card, session_card
from conductor.hidden.tail_notes import INDEX_BUDGET, LISTED_BUDGET, CountTokens, build_index
from conductor.notes import NoteStore
from conductor.notes.note_format import Note

SHARED_KIND = "shared"
SESSION_KIND = "session"


@dataclass(frozen=True)
class SharedContext:
    text: str
    note_ids: tuple[str, ...]  # the notes the index lists
    version: str  # a hash of the text

    @classmethod
    def of(cls, text: str, note_ids: tuple[str, ...] = ()) -> SharedContext:
        version = hashlib.blake2b(text.encode(), digest_size=8).hexdigest()
        return cls(text, note_ids, version)


def shared_notes(store: NoteStore, project: str | None) -> list[Note]:
    """Live notes every session of this user and project may see (never a session's own,
    never an archived note or a stale program_state)."""
    notes = store.list(scope="user", include_stale=False)
    if project:
        notes += store.list(scope="project", project=project, include_stale=False)
    return notes


def session_notes(store: NoteStore, session: str) -> list[Note]:
    return store.list(scope="session", session=session, include_stale=False)


NOTE_FILE_ID = re.compile(r"--([0-9a-f]{10})\.md$")


def visible_note_ids(store: NoteStore, project: str | None, session: str | None) -> set[str]:
    """The notes a request may read, by any path (the memory routes, memory_search,
    memory_read): the rule the hidden context follows. The user's live notes, the current
    project's, the session's own; never another project's or session's, never archived.
    The same filters as `shared_notes` and `session_notes`, on ids alone."""
    ids = set(store.ids(scope="user", include_stale=False))
    if project:
        ids |= store.ids(scope="project", project=project, include_stale=False)
    if session:
        ids |= store.ids(scope="session", session=session, include_stale=False)
    return ids


def hits_to_ask_for(limit: int) -> int:
    """How many search hits to ask for when some may be hidden (`visible_hits`), so the
    answer still holds `limit`."""
    return min(3 * limit, 50)


def visible_hits(hits: list, visible: set[str], limit: int) -> list:
    """Search hits a request may see: a hit on a note's file (by its name, whatever source
    indexed it) only when the note is visible (see visible_note_ids)."""
    kept = [h for h in hits if note_id_of_file(h.path) in visible | {None}]
    return kept[:limit]


def note_id_of_file(path: str) -> str | None:
    """The note id in a note file's name (`<kind>-<slug>--<id>.md`)."""
    found = NOTE_FILE_ID.search(path)
    return found.group(1) if found else None


def _card_and_index(card: str | None, notes: Iterable[Note] | None,
                    count_tokens: CountTokens, index_budget: int = LISTED_BUDGET
                    ) -> tuple[str, tuple[str, ...]] | None:
    """`card`, then the index of `notes`: one hidden message's text and the listed ids."""
    parts: list[str] = [card] if card else []
    index = build_index(notes, count_tokens, index_budget) if notes else None
    if index is not None:
        parts.append(index.text)
    if not parts:
        return None
    return "\n\n".join(parts), index.note_ids if index is not None else ()


def build_shared_context(card: bool, notes: Iterable[Note] | None,
                         count_tokens: CountTokens,
                         index_budget: int = INDEX_BUDGET) -> SharedContext | None:
    """The card (when the request may write) and the index of `notes` within
    `index_budget` tokens (when it reads; None means it does not); None when there is
    nothing to show."""
    built = _card_and_index(memory_card() if card else None, notes, count_tokens,
                            index_budget)
    return SharedContext.of(*built) if built is not None else None


def build_session_tail(token: str | None, notes: Iterable[Note] | None,
                       count_tokens: CountTokens) -> tuple[str, tuple[str, ...]] | None:
    """The session's own hidden tail: its memory-routes token and an index of the notes
    written in this session (after a miss, so they are not lost with the old prompt).
    Always listed (within `LISTED_BUDGET`): a session's own notes are few, and a profile
    that shows no shared index still lets the model see what it wrote."""
    return _card_and_index(session_card(token) if token else None, notes, count_tokens)
