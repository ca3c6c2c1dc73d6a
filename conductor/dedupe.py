"""Is a new note the same fact as one already stored in its scope?

Two tests, in order:

1. the same normalised title (case, punctuation and spacing ignored);
2. a close BM25 match. The new note's words are the query; each of the top candidates in
   the same scope is scored, and the score is normalised by the candidate's *self-match*
   score (its own words as the query, against itself). The ratio is the share of the
   candidate's BM25 weight that the new note covers: about 1.0 for a restatement, low for
   another fact on the same topic. Both scores use the same index statistics, so the ratio
   is comparable across scopes and index sizes, where raw BM25 scores are not.

``DEDUPE_THRESHOLD`` was chosen on the labelled pairs in
``tests/conductor/dedupe_pairs.py`` (see ``conductor/NOTES_STORE.md``).
"""

from __future__ import annotations

from collections.abc import Mapping

from conductor.note_format import Note, normalise_title
from conductor.search import NoteIndex, note_text

# Chosen on the labelled set: restatements scored 0.68-1.00, other facts on the same topic
# 0.13-0.48; 0.58 is the middle of the gap (NOTES_STORE.md).
DEDUPE_THRESHOLD = 0.58
CANDIDATES = 5


def same_title(a: str, b: str) -> bool:
    return normalise_title(a) == normalise_title(b)


def closest(
    index: NoteIndex,
    notes: Mapping[str, Note],
    text: str,
    filters: Mapping[str, str | None],
) -> tuple[Note, float] | None:
    """The live note in ``filters``' scope that ``text`` covers best, with its ratio."""
    best: tuple[Note, float] | None = None
    for note_id, score in index.search(text, {**filters, "state": "live"}, limit=CANDIDATES):
        candidate = notes.get(note_id)
        if candidate is None or candidate.archived:
            continue
        self_score = index.score(note_text(candidate), note_id)
        ratio = score / self_score if self_score > 0 else 0.0
        if best is None or ratio > best[1]:
            best = (candidate, ratio)
    return best


def find_duplicate(
    index: NoteIndex,
    notes: Mapping[str, Note],
    *,
    title: str,
    text: str,
    filters: Mapping[str, str | None],
    threshold: float = DEDUPE_THRESHOLD,
) -> Note | None:
    """The note an add should revise instead of adding, or None."""
    scope, key = filters.get("scope"), filters.get("project") or filters.get("session")
    for note in notes.values():
        if note.archived or note.scope != scope or note.scope_key != key:
            continue
        if same_title(note.title, title):
            return note
    match = closest(index, notes, text, filters)
    if match is not None and match[1] >= threshold:
        return match[0]
    return None
