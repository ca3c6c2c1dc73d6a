"""The quality bench's strict judge: a reply is right only when it gives the answer, and
gives nothing else that could be taken for it.

An item has accepted answers and wrong values (the old value of an updated fact, a
look-alike). The rules, in order:

1. An item whose question holds an accepted answer is not scored: the model could copy
   it from the question ("Tabs or spaces...?" -> "tabs").
2. A bare "yes" or "no" is never an accepted answer: a reply that opens "No, I'm not a bot"
   matches it without answering. The item's other accepted answers stand; an item with
   only those is not scored.
3. A reply that shows a note's markup from the hidden context (its id, as the index and
   the header `[0123456789] title (kind, status)` give it or in `(note 0123456789)`, or
   the `(kind, status)` tail) copies the hidden context instead of answering: wrong.
4. A reply that names a wrong value is wrong ("Yes, you can deploy ... the freeze starts"
   names "yes"), and so is one that offers the answer as one of several
   ("teal or blue", "either 18 or 20").
5. Otherwise it is right when an accepted answer appears as a word or words of its own.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

BARE = frozenset({"yes", "no"})
INDEX_LINE = re.compile(r"\[[0-9a-f]{10}\]|\(note [0-9a-f]{10}\b|"
                        r"\((?:rule|reference|preference|gotcha|runbook|decision|project|"
                        r"fact)[^()]*,\s*(?:provisional|ratified)\)",
                        re.IGNORECASE)
ALTERNATIVE = r"(?:\bor\b|\beither\b|/)"


@dataclass(frozen=True)
class Verdict:
    scored: bool
    correct: bool
    reason: str


def names(text: str, value: str) -> bool:
    """`value` appears in `text` as a word or words of its own (case-insensitive)."""
    return re.search(rf"(?<![\w]){re.escape(value.lower())}(?![\w])", text.lower()) is not None


def judgeable(question: str, answers: tuple[str, ...]) -> tuple[str, ...] | str:
    """The answers a reply is judged by, or why the item cannot be scored."""
    kept = tuple(a for a in answers if a.lower() not in BARE)
    if not kept:
        return "its only accepted answers are a bare yes or no"
    in_question = [a for a in answers if names(question, a)]
    if in_question:
        return f"its question holds the accepted answer {in_question[0]!r}"
    return kept


def judge(question: str, reply: str, answers: tuple[str, ...],
          wrong: tuple[str, ...] = ()) -> Verdict:
    kept = judgeable(question, answers)
    if isinstance(kept, str):
        return Verdict(False, False, kept)
    if INDEX_LINE.search(reply):
        return Verdict(True, False, "repeats a note's index line")
    named_wrong = [w for w in wrong if names(reply, w)]
    if named_wrong:
        return Verdict(True, False, f"names the wrong value {named_wrong[0]!r}")
    given = [a for a in kept if names(reply, a)]
    if not given:
        return Verdict(True, False, "gives no accepted answer")
    if any(_offered_among_others(reply, a) for a in given):
        return Verdict(True, False, "offers the answer as one of several")
    return Verdict(True, True, f"gives {given[0]!r}")


def _offered_among_others(reply: str, answer: str) -> bool:
    """The answer joined to another candidate by "or", "either" or a slash."""
    value = re.escape(answer.lower())
    text = reply.lower()
    before = rf"{ALTERNATIVE}\s+(?:\w+\s+){{0,2}}{value}(?![\w])"
    after = rf"(?<![\w]){value}\s*,?\s+{ALTERNATIVE}\s+\w"
    return re.search(before, text) is not None or re.search(after, text) is not None
