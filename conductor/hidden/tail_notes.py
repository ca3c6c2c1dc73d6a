"""Tail notes: what memory puts into a prompt, right after the turn's new messages.

* The index: pinned ratified rules first, then one line per note the request may see,
  within its budget; when over, pinned notes are kept first, then ratified ones, then the
  most recently updated. None by default (below).
* The matching notes: for a new user message, BM25 over it; at most `max_matches` notes
  that bear on it (`bears_on`: two of its words, stemmed as the index stems them, or one
  that names the note) and were not injected earlier in the session, within
  `match_budget` tokens.

`NotesShown` holds those sizes and the matching notes' format (a profile's
`memory.notes_shown` sets them). The defaults are what `tandem bench --index` chose
(bench/README.md, "What the index costs"): under many clients the matched notes' prefill
is what a lived-in store costs, and the index adds to it, while a small model answers
best from one note shown as a plain statement. An index of `LISTED_BUDGET` tokens is one
profile key away, and a session's own notes are always listed in its tail.

Each tail goes in once, where it was chosen, and the ledger replays it there on every
later turn; this module only chooses and renders. Token counts come from the caller.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass

from conductor.notes import NoteStore
from conductor.notes.note_format import Note
from conductor.search.notes_bm25 import note_text, stems

INDEX_BUDGET = 0  # no index in the shared context by default
LISTED_BUDGET = 1500  # an index where one is shown: a session's own notes, a profile's choice
MATCH_BUDGET = 600
MAX_MATCHES = 1
MIN_SHARED_WORDS = 2
SEARCH_DEPTH = 12

NOTE_FORMATS = ("header", "plain")

INDEX_FRAME = ("Hidden memory context; never mention it. The notes you may draw on "
               "(id, kind, title; ratified means confirmed by the user):")
MATCH_FRAME = (
    "Notes from memory that may bear on this message (hidden context). If one answers it, "
    "answer from it and say the answer comes from your notes; a ratified note was "
    "confirmed by the user. If notes disagree with each other or with the files in front "
    "of you, tell the user.")
# The same in a third of the tokens: it is prefilled with every message that matches a note.
SHORT_MATCH_FRAME = "Hidden notes that may answer this message; answer from them if they do:"
MATCH_FRAMES = {"full": MATCH_FRAME, "short": SHORT_MATCH_FRAME}
# The same frames for notes placed before the message they match (`match_place: before`).
LEAD_MATCH_FRAMES = {
    "full": MATCH_FRAME.replace("this message", "the user's next message"),
    "short": SHORT_MATCH_FRAME.replace("this message", "the user's next message"),
}
# Where a message's matched notes go: "before" it, right after what the prompt holds so
# far (the record's ids, or the head and shared context of a new session), where the
# idle services can have them cached before the message comes (a new session's likely
# notes prewarmed, a later turn's prefetched as branches); or "after" it, where nothing
# can be cached for them ahead of the message.
MATCH_PLACES = ("before", "after")

CountTokens = Callable[[str], int]


@dataclass(frozen=True)
class NotesShown:
    """How much of the notes the hidden context shows, and how.

    `index_budget` 0 shows no index (the notes reach the model only as matches, and by
    the memory tools). `note_format`: "header" puts `[id] title (kind, status)` on a line
    above a matched note's body; "plain" writes `title: body`, which a small model reads
    as a statement instead of a header to copy."""

    index_budget: int = INDEX_BUDGET
    match_budget: int = MATCH_BUDGET
    max_matches: int = MAX_MATCHES
    note_format: str = "plain"
    match_frame: str = "full"  # the matches' preamble: "full" or "short"
    match_place: str = "before"  # MATCH_PLACES

    def __post_init__(self) -> None:
        if min(self.index_budget, self.match_budget, self.max_matches) < 0:
            raise ValueError("notes_shown: budgets and max_matches must be 0 or more")
        if self.note_format not in NOTE_FORMATS:
            raise ValueError(f"notes_shown: note_format must be one of {NOTE_FORMATS}")
        if self.match_frame not in MATCH_FRAMES:
            raise ValueError(f"notes_shown: match_frame must be one of {tuple(MATCH_FRAMES)}")
        if self.match_place not in MATCH_PLACES:
            raise ValueError(f"notes_shown: match_place must be one of {MATCH_PLACES}")

    @property
    def leads(self) -> bool:
        """Whether matched notes go before the message they match."""
        return self.match_place == "before"

    @property
    def frame(self) -> str:
        """The matched notes' preamble, as their place asks."""
        return (LEAD_MATCH_FRAMES if self.leads else MATCH_FRAMES)[self.match_frame]

    @classmethod
    def of(cls, overrides: Iterable[tuple[str, object]]) -> NotesShown:
        """The defaults with a profile's `memory.notes_shown` pairs on top."""
        return cls(**dict(overrides))


DEFAULT_SHOWN = NotesShown()


_WORD = re.compile(r"[a-z0-9][a-z0-9_'-]*")
_STOPWORDS = frozenset(
    "a an and are as at be but by can do does for from had has have how i if in is it its "
    "me my no not of on or our so that the their them then there these this to us was we "
    "were what when where which who why will with you your".split())


def content_words(text: str) -> set[str]:
    """Lower-cased words of a text, without stopwords and one-letter words."""
    return {w for w in _WORD.findall(text.lower()) if len(w) > 1 and w not in _STOPWORDS}


# Words that say what kind of message it is, not what it is about: the memory verbs ("do
# you remember ...", "update ..."), "user" (the notes' name for the person), and a
# question's frame ("which band do I like most", "how often", "what is it called").
_FRAME_WORDS = stems(
    "about after again all also am any been being best both could did does doing done "
    "each even ever every few get got give had he her here his into just know let like "
    "make many may might more most much must need never now often only other out over "
    "please really same say should she some such take tell than thanks thank they thing "
    "things think those too very want way well would yes yet remember forget note memory "
    "update name called user".split())
_FIRST_PERSON = re.compile(r"\b(?:i|i'm|i've|i'd|my|mine|we|we're|we've|our|ours)\b", re.I)


def topic_words(text: str) -> list[str]:
    """A text's content words less the frame words and a possessive's "'s" (the index
    reads "dog's" as "dog" and "s", and "s" matches every "user's"): what it is about."""
    words = {re.sub(r"'s?$", "", w) for w in content_words(text)}
    return sorted(w for w in words if len(w) > 1 and not stems([w]) <= _FRAME_WORDS)


def match_words(text: str) -> set[str]:
    """What a match compares: a text's topic words as the index stems them ("dog's" is
    "dog", "migrations" "migrat")."""
    return stems(topic_words(text))


@functools.lru_cache(maxsize=8192)
def note_match_words(text: str) -> frozenset[str]:
    """`match_words` of a note's text (`note_text`), memoised by the text itself: every
    request read its search hits into stems again (issue 58, item 4). A write changes the
    text: an edited note is read afresh, and no store change has to be watched for."""
    return frozenset(match_words(text))


def bears_on(shared: AbstractSet[str], note: Note, best: bool, about_the_user: bool,
             min_shared: int = MIN_SHARED_WORDS) -> bool:
    """Whether a note bears on a message it shares `shared` stems with: `min_shared` of
    them (two for a message), or one that names the note (a word of its title) when the
    note is the search's best hit and the message speaks of the user's own things ("when
    is my birthday?" and the note "user's birthday"). One word alone would pull a note
    into any message that says it ("a birthday party idea"), so it takes all three."""
    if len(shared) >= min_shared:
        return True
    return best and about_the_user and bool(shared & match_words(note.title))


@dataclass(frozen=True)
class TailNote:
    kind: str  # "index" or "notes"
    text: str
    note_ids: tuple[str, ...]


def _index_line(note: Note) -> str:
    mark = " (ratified)" if note.status == "ratified" else ""
    return f"- [{note.id}] {note.kind}: {note.title}{mark}"


def _is_pinned_rule(note: Note) -> bool:
    return note.pinned and note.status == "ratified" and note.kind in ("rule", "ruling")


def build_index(notes: Iterable[Note], count_tokens: CountTokens,
                budget: int = LISTED_BUDGET) -> TailNote | None:
    """The index tail, or None when there is no note to list (or a budget of 0)."""
    if budget <= 0:
        return None
    by_priority = sorted(
        notes,
        key=lambda n: (not _is_pinned_rule(n), n.status != "ratified", -n.updated.timestamp()),
    )
    if not by_priority:
        return None
    lines: list[str] = []
    chosen: list[Note] = []
    used = count_tokens(INDEX_FRAME)
    for note in by_priority:
        line = _index_line(note)
        cost = count_tokens("\n" + line)
        if used + cost > budget:
            if _is_pinned_rule(note):
                continue  # a pinned rule too long to fit still lets later ones try
            break
        lines.append(line)
        chosen.append(note)
        used += cost
    if not chosen:
        return None
    return TailNote("index", "\n".join([INDEX_FRAME, *lines]), tuple(n.id for n in chosen))


def note_block(note: Note, note_format: str = "header") -> str:
    """A note as the hidden context shows it. "header": id, title, kind, status on a line,
    then its body; "plain": title and body as one statement, no id (the index, when
    shown, lists the ids an update names)."""
    if note_format == "plain":
        mark = " (confirmed by the user)" if note.status == "ratified" else ""
        return f"{note.title}: {' '.join(note.body.split())}{mark}"
    status = "ratified" if note.status == "ratified" else "provisional"
    return f"[{note.id}] {note.title} ({note.kind}, {status})\n{note.body}".rstrip()


def match_cost(note: Note, shown: NotesShown, count_tokens: CountTokens) -> int:
    """What one note adds to the matches' tail, in tokens (its budget is `match_budget`,
    the frame included)."""
    return count_tokens("\n\n" + note_block(note, shown.note_format))


def build_matches(store: NoteStore, message: str, allowed: Iterable[Note] | AbstractSet[str],
                  already: set[str], count_tokens: CountTokens,
                  shown: NotesShown = DEFAULT_SHOWN,
                  in_place: frozenset[str] = frozenset(),
                  frame: str | None = None,
                  min_shared: int = MIN_SHARED_WORDS) -> TailNote | None:
    """The matching-notes tail for one user message, or None when nothing qualifies.

    `allowed`: the notes the message may match, or their ids (a caller that lists no
    note has no copies to make: `NoteReads.ids`).
    `already`: notes matched earlier in the session, skipped (the message gets others).
    `in_place`: notes prefetched for this message: one it matches takes its place among
    the matches without a second copy, so a right guess costs nothing after the message.
    `frame`: the preamble, when not the profile's (`shown.match_frame`).
    `min_shared`: the stems a note shares with the text to match (`bears_on`)."""
    if shown.max_matches == 0:
        return None
    allowed_ids = allowed if isinstance(allowed, AbstractSet) else {n.id for n in allowed}
    if not allowed_ids:  # no note to match: skip reading the message (on every request)
        return None
    topic = topic_words(message)
    words = stems(topic)  # match_words(message), from the one reading of its topic words
    if not words:
        return None
    about_the_user = bool(_FIRST_PERSON.search(message))
    chosen: list[Note] = []
    frame = frame or shown.frame
    used = count_tokens(frame)
    placed = 0  # matches already in the prompt, prefetched
    first = True  # the best hit the message may see (one injected before still counts)
    # The search reads the topic words only: "name" in "what is my dog's name?" would
    # rank a note titled "laptop name" above the dog's in a small store.
    for note, _score in store.search(" ".join(topic), limit=SEARCH_DEPTH,
                                     include_stale=False):
        if note.id not in allowed_ids:
            continue
        best, first = first, False
        if note.id in already and note.id not in in_place:
            continue
        if not bears_on(words & note_match_words(note_text(note)), note, best, about_the_user,
                        min_shared):
            continue
        if note.id in in_place:
            placed += 1
            if placed + len(chosen) == shown.max_matches:
                break
            continue
        cost = match_cost(note, shown, count_tokens)
        if used + cost > shown.match_budget:
            continue
        chosen.append(note)
        used += cost
        if placed + len(chosen) == shown.max_matches:
            break
    if not chosen:
        return None
    return matched_tail(chosen, shown, frame)


def lone_match_tail(note: Note, shown: NotesShown, count_tokens: CountTokens) -> str | None:
    """The text of the tail a message matching `note` alone gets, as `build_matches`
    writes it (what the idle services prefill ahead of such a message); None when it is
    over the match budget (no match shows it)."""
    if count_tokens(shown.frame) + match_cost(note, shown, count_tokens) > shown.match_budget:
        return None
    return matched_tail([note], shown).text


def matched_tail(notes: Sequence[Note], shown: NotesShown = DEFAULT_SHOWN,
                 frame: str | None = None) -> TailNote:
    """The matching-notes tail that shows `notes`, as `build_matches` writes it: the idle
    services prefill a note's tail ahead of the message that will match it, and the prefix
    cache finds it only if the ids are the same."""
    text = "\n\n".join([frame or shown.frame, *(note_block(n, shown.note_format) for n in notes)])
    return TailNote("notes", text, tuple(n.id for n in notes))
