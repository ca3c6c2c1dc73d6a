"""Is a new note the same fact as one already stored in its scope?

Two tests, in order:

1. the same normalised title (case, punctuation and spacing ignored);
2. a close BM25 match. The new note's words are the query; each of the top candidates in
   the same scope is scored, and the score is normalised by the candidate's *self-match*
   score (its own words as the query, against itself). The ratio is the share of the
   candidate's BM25 weight that the new note covers: about 1.0 for a restatement, low for
   another fact on the same topic. Both scores use the same index statistics, so the ratio
   is comparable across scopes and index sizes, where raw BM25 scores are not.

A candidate found either way is then checked for a **different fact**: lexical overlap
alone cannot tell "port 5433" from "port 5432", so the words the two notes do not share
are compared. Each side's *key words* are the ones it says in its title and again in its
body (its subject and value: "staging", "5433", "Biscuit"; the whole title when the body
repeats none of it), plus every *specific* token
(a number, a path, a version, an identifier, a name). When the old note has a key word
the new one never mentions *and* the new one has a key word the old never mentions, one
value took another's place: two facts, no merge. A paraphrase changes only the words
around the fact; a typo fix (close spelling) is not a different value. The model's
``update`` op stays the way to correct a value.

``DEDUPE_THRESHOLD`` was chosen on the labelled pairs in
``tests/conductor/dedupe_pairs.py``; the different-fact rule was measured on
``tests/data/dedupe/pairs.jsonl`` (see ``conductor/NOTES_STORE.md``).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping

from conductor.notes.note_format import Note, normalise_title
from conductor.search.notes_bm25 import NoteIndex, note_text

# A candidate finder since the different-fact check guards the merge: restatements of the
# first labelled set score 0.68-1.00; on the 203 pairs, 0.45 misses 10% of restatements
# (0.58: 20%) and merges no different fact (NOTES_STORE.md).
DEDUPE_THRESHOLD = 0.45
CANDIDATES = 5


_TOKEN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_./:@-]*[A-Za-z0-9]|[A-Za-z0-9]")
_SPECIFIC = re.compile(r"\d|[/_.:@]|[a-z][A-Z]|^[A-Z][a-z]")
_STOPWORDS = frozenset(
    "a an and are as at be but by can do does for from had has have how i if in is it its "
    "me my no not of on or our so that the their them then there these this to us was we "
    "were what when where which who why will with you your all any every use used uses "
    "using user user's users".split())
# Words a sentence opens with (articles, pronouns, linking words, a note's usual verbs): a
# capitalised opener outside these, said nowhere else, is taken for a name.
_OPENERS = frozenset(
    "the a an this that these those it its we our you your i my he she his her they their "
    "there here what when where which who why how if then so but and or also all any each "
    "every no not never always only just please note use run set add make keep do don't "
    "to for in on at by from with after before during while since until as be is are was "
    "were has have had will would should must can could may might one some many most more "
    "new old first last next our connect deploy build install start stop check call send "
    "open close read write see ask tell let try put get go take give find".split())
SPELLING = 0.85  # two words this alike (difflib ratio) are one word spelt two ways
_POSSESSIVE = re.compile(r"['’]s$")


def same_title(a: str, b: str) -> bool:
    return normalise_title(a) == normalise_title(b)


def normal_word(token: str, skip: frozenset[str]) -> str | None:
    """`token` as compared: lower case, without its 's, a plural's s dropped (deploys ~
    deploy); None for a word of `skip` or a single letter (a digit is kept). Shared with
    a forget's target words (`conductor.writing.command_targets`)."""
    word = _POSSESSIVE.sub("", token.lower())
    if word in skip or len(word) < 2 and not word.isdigit():
        return None
    if word.isalpha() and len(word) > 3 and word.endswith("s") and not word.endswith("ss"):
        word = word[:-1]
    return word


def spelt_alike(a: str, b: str) -> bool:
    """One word spelt two ways: a difflib ratio of SPELLING or more. The ratio can reach
    it only when the lengths are close (2*min/(a+b) bounds it): difflib is skipped else."""
    if 2 * min(len(a), len(b)) < SPELLING * (len(a) + len(b)):
        return False
    return difflib.SequenceMatcher(None, a, b).ratio() >= SPELLING


def _words(text: str) -> dict[str, str]:
    """Normalised word -> the word as written (for telling names and values apart)."""
    out: dict[str, str] = {}
    for token in _TOKEN.findall(text):
        word = normal_word(token, _STOPWORDS)
        if word is not None:
            out.setdefault(word, token)
    return out


def _key_words(title: str, body: str) -> tuple[dict[str, str], set[str]]:
    """(every word with its spelling, the key words): said in the title and again in the
    body, or specific."""
    in_title, in_body = _words(title), _words(body)
    every = {**in_body, **in_title}
    # A body that does not say the title's words again leaves the whole title as the key.
    key = {w for w in in_title if w in in_body} or set(in_title)
    key |= {w for w, raw in every.items() if _SPECIFIC.search(raw) and not _sentence_start(
        raw, title, body)}
    return every, key


def _sentence_start(raw: str, title: str, body: str) -> bool:
    """A capitalised plain word that only opens a sentence is not a name, unless it is no
    word a sentence opens with but a name would ("Ana leads the team")."""
    if not re.fullmatch(r"[A-Z][a-z]+", raw):
        return False
    if raw.lower() not in _OPENERS and not set(_words(raw)) & set(_words(title)):
        return False
    anywhere = re.findall(rf"(?:^|[^.!?]\s)({re.escape(raw)})\b", f"{title}\n{body}",
                          re.MULTILINE)
    openers = re.findall(rf"(?:^|[.!?]\s+)({re.escape(raw)})\b", f"{title}\n{body}",
                         re.MULTILINE)
    return len(openers) >= len(anywhere)


def different_facts(old: Note, title: str, body: str) -> bool:
    """True when the new note is not the old one's fact said again: it puts another value
    where the old one had its own, or it leaves out one of the old note's entities or
    values (a name, a number, a path): a merge would lose it. An explicit update ("is
    now", "moved to") of the same subject is the one exception (`supersedes`)."""
    dropped, added = _changed_key_words(old, title, body)
    if dropped and {w for w in added if w not in _UPDATE_VOCABULARY}:
        return not supersedes(old, title, body)
    # "Ana leads the payments team." is not "The payments team keeps its phone in the
    # drawer.": the new text never says Ana. Most of the old note's entities and values
    # left out is another fact; one detail of several (a file named in passing) is not.
    words, old_key = _key_words(old.title, old.body)
    specific = [w for w in old_key if _is_value(words[w], old.title, old.body)]
    lost = [w for w in dropped if _is_value(dropped[w], old.title, old.body)]
    return bool(lost) and 2 * len(lost) > len(specific)


def supersedes(old: Note, title: str, body: str) -> bool:
    """The new note says, in so many words, that the old one's value changed: the same
    subject (every key word of the old but its values said again), only values replaced,
    and update words ("is now", "changed to", "no longer")."""
    dropped, added = _changed_key_words(old, title, body)
    added = {w: raw for w, raw in added.items() if w not in _UPDATE_VOCABULARY}
    if not dropped or not added or not _UPDATE_WORDS.search(f"{title}\n{body}"):
        return False
    return (all(_is_value(raw, old.title, old.body) for raw in dropped.values())
            and all(_is_value(raw, title, body) for raw in added.values()))


def _is_value(raw: str, title: str, body: str) -> bool:
    """A number, a path, an identifier, a name: not a capitalised word opening a sentence."""
    return bool(_SPECIFIC.search(raw)) and not _sentence_start(raw, title, body)


_UPDATE_VOCABULARY = frozenset(
    "now new longer instead changed moved switched updated renamed".split())
_UPDATE_WORDS = re.compile(r"\b(?:is|are) now\b|\bnow (?:is|are|uses?|lives?|works?)\b|"
                           r"\b(?:changed|moved|switched|updated|renamed) (?:to|from)\b|"
                           r"\bno longer\b|\binstead of\b|\bfrom now on\b|\bnew\b",
                           re.IGNORECASE)


def _changed_key_words(old: Note, title: str, body: str) -> tuple[dict[str, str],
                                                                   dict[str, str]]:
    """(the old note's key words the new one never says, the new one's key words the old
    never says), each word with its spelling, spelling fixes paired off."""
    old_words, old_key = _key_words(old.title, old.body)
    new_words, new_key = _key_words(title, body)
    dropped = {w: old_words[w] for w in old_key if w not in new_words}
    added = {w: new_words[w] for w in new_key if w not in old_words}
    # A spelling fix is not a new value: pair off alphabetic words that are close.
    for word in list(dropped):
        twin = next((a for a in added if word.isalpha() and a.isalpha() and
                     spelt_alike(word, a)), None)
        if twin is not None:
            del dropped[word]
            del added[twin]
    return dropped, added


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
    body: str,
    text: str,
    filters: Mapping[str, str | None],
    threshold: float = DEDUPE_THRESHOLD,
) -> Note | None:
    """The note an add should revise instead of adding, or None."""
    scope, key = filters.get("scope"), filters.get("project") or filters.get("session")
    for note in notes.values():
        if note.archived or note.scope != scope or note.scope_key != key:
            continue
        if same_title(note.title, title) and not different_facts(note, title, body):
            return note
    match = closest(index, notes, text, filters)
    if match is not None and match[1] >= threshold and not different_facts(match[0], title,
                                                                            body):
        return match[0]
    return None
