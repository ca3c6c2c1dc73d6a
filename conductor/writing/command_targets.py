"""Which note a "forget ..." names (issue 68): a strong match or none.

A forget used to archive the *nearest* live note by BM25 share, so "forget that I am
allergic to penicillin" sent again, once the penicillin note was gone, archived "I am
allergic to nuts": the one word "allergic" covered half of that note's weight. Forgetting
the wrong fact is worse than forgetting nothing (the user can say it again, or use the
Memory screen), so a note is named only when it holds **every** word the user named of it:
the target's content words (not the filler around a forget: "my", "that", "old", "the
note about"), each said in the note's title or body, allowing a plural, a spelling variant
("colour"/"color") or another form of one stem ("allergies"/"allergic"). A long target
(six words or more) may miss one word that is no number or name (a word the user wrote
with a capital past their first: "Lisbon" is not "Porto"). Of the notes that pass, the
one the target covers most of wins (then the newest, the user's and the project's
together).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from conductor.notes import NoteStore
from conductor.notes.dedupe import normal_word, spelt_alike
from conductor.notes.note_format import Note

# Words that say nothing of which note: function words, and what a forget wraps its
# target in ("forget the note about my old address", "what I told you about ...").
_FILLER = frozenset(
    "a an and are as at be been but by can do does did for from had has have how i i'm "
    "i've i'd am if in is it its it's me my mine myself no not of on or our ours so that "
    "the their them then there these this those to us was we were what when where which "
    "who why will with you your yours all any every also just please now "
    "about told said say mentioned fact facts note notes thing things stuff bit part info "
    "information detail details everything anything something remember remembered know "
    "stored saved memory memories old previous former current earlier".split())
_WORD = re.compile(r"[^\W_]+(?:['’][^\W_]+)*", re.UNICODE)
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u9fff]+")
_SPECIFIC = re.compile(r"\d")
STEM = 5  # a shared opening this long (and most of the shorter word) is one stem
LONG_TARGET = 6  # from this many content words, one plain word may be missing


def target_words(text: str) -> set[str]:
    """The content words of `text`, normalised; Chinese and Japanese as character pairs
    (they have no spaces to split on)."""
    words: set[str] = set()
    for run in _CJK.findall(text):
        words |= {run[i:i + 2] for i in range(max(1, len(run) - 1))}
    for token in _WORD.findall(_CJK.sub(" ", text.lower())):
        word = normal_word(token, _FILLER)  # as a new note's dedupe: codes ~ code
        if word is not None:
            words.add(word)
    return words


def target_names(text: str) -> frozenset[str]:
    """The target words of `text` written with a capital past its first word: names, which
    a note must say however long the target."""
    tokens = _WORD.findall(_CJK.sub(" ", text))[1:]
    return frozenset(word for token in tokens if token[0].isupper()
                     and (word := normal_word(token, _FILLER)) is not None)


def _covered(word: str, words: set[str]) -> bool:
    if word in words:
        return True
    if not word.isalpha() or len(word) < 4:  # a number or a short word: said exactly
        return False
    for other in words:
        if not other.isalpha():
            continue
        shared = len(_common_opening(word, other))
        if shared >= STEM and shared >= 0.75 * min(len(word), len(other)):
            return True
        if spelt_alike(word, other):  # "colour" ~ "color", as a new note's dedupe
            return True
    return False


def _common_opening(a: str, b: str) -> str:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return a[:n]


def _score(wanted: set[str], note: Note,
           names: frozenset[str] = frozenset()) -> tuple[float, float] | None:
    """(the share of `wanted` the note says, the share of the note's words named) when the
    note is named strongly enough; None when it is not."""
    said = target_words(f"{note.title}\n{note.body}")
    allowed = 1 if len(wanted) >= LONG_TARGET else 0
    missing: list[str] = []
    for word in wanted:  # a note ruled out by its first words missing is left at once
        if not _covered(word, said):
            missing.append(word)
            if len(missing) > allowed or _SPECIFIC.search(word) or word in names:
                return None
    named = sum(1 for w in said if _covered(w, wanted))
    return (1 - len(missing) / len(wanted), named / len(said) if said else 0.0)


def strongest(wanted: set[str], notes: Iterable[Note],
              names: frozenset[str] = frozenset()) -> Note | None:
    """The note `wanted` (of which `names` are names) names, of `notes` (newest first), or
    None."""
    best: tuple[tuple[float, float], Note] | None = None
    for note in notes:
        score = _score(wanted, note, names)
        if score is not None and (best is None or score > best[0]):
            best = (score, note)
    return best[1] if best is not None else None


def forget_target(store: NoteStore, what: str, project: str | None) -> str | None:
    """The id of the user's live note (their own or the project's) that the forget's
    `what` names, or None when none is named strongly."""
    wanted = target_words(what)
    if not wanted:
        return None
    notes = store.list(scope="user")
    if project is not None:
        notes += store.list(scope="project", project=project)
        notes.sort(key=lambda note: note.updated, reverse=True)  # each list was newest first
    found = strongest(wanted, notes, target_names(what))
    return found.id if found is not None else None
