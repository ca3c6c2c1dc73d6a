"""The quality bench's fact set: JSON Lines, one item a line.

    {"note": {"kind", "scope", "title", "body"}, "question", "answers": [...],
     "wrong": [...], "revised": "a later body", "more": [{note}, ...]}

An item is of one kind, reported on its own:
- `single`: one note holds the answer;
- `updated`: the note was revised (`revised`, written as the store's update after the
  note); only the new value is right, and the old one belongs in `wrong`;
- `several notes`: the answer needs the note and the `more` notes together.
(`pipeline` items, facts that reach the notes only through a conversation and the
background writer, are the writer lane's: bench/quality/writer_lane.py.)
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

FACTS = Path(__file__).resolve().parent / "facts.jsonl"
ITEM_KINDS = ("single", "updated", "several notes")


class FactSetError(ValueError):
    """A fact set that cannot be used; the message names the line."""


@dataclass(frozen=True)
class Note:
    kind: str
    scope: str
    title: str
    body: str

    def line(self) -> str:
        return f"- {self.title}: {self.body}"


@dataclass(frozen=True)
class Fact:
    kind: str
    scope: str
    title: str
    body: str
    question: str
    answers: tuple[str, ...]
    wrong: tuple[str, ...] = ()  # values a right reply never names: an old value, a look-alike
    revised: str | None = None  # the note's body after its update
    more: tuple[Note, ...] = ()  # further notes the answer needs

    @property
    def item_kind(self) -> str:
        return "updated" if self.revised else "several notes" if self.more else "single"

    def notes(self) -> list[Note]:
        """The notes as they stand once written (a revised note with its new body)."""
        return [Note(self.kind, self.scope, self.title, self.revised or self.body),
                *self.more]

    def note_line(self) -> str:
        return "\n".join(note.line() for note in self.notes())


def _note(raw: dict) -> Note:
    return Note(raw["kind"], raw.get("scope", "user"), raw["title"], raw["body"])


def load_facts(path: Path) -> list[Fact]:
    facts = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            raw = json.loads(line)
            note = _note(raw["note"])
            fact = Fact(note.kind, note.scope, note.title, note.body, raw["question"],
                        tuple(raw["answers"]), tuple(raw.get("wrong") or ()),
                        raw.get("revised"), tuple(_note(m) for m in raw.get("more") or ()))
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise FactSetError(f"{path}:{n}: not a fact item ({exc})") from None
        if not isinstance(raw["answers"], list) or not fact.answers \
                or not all(isinstance(a, str) and a for a in fact.answers):
            raise FactSetError(f"{path}:{n}: needs at least one accepted answer")
        if not all(isinstance(w, str) and w for w in fact.wrong):
            raise FactSetError(f"{path}:{n}: 'wrong' is a list of values (text)")
        if fact.revised is not None and not isinstance(fact.revised, str):
            raise FactSetError(f"{path}:{n}: 'revised' is the note's later body (text)")
        facts.append(fact)
    if not facts:
        raise FactSetError(f"{path}: no items")
    return facts


def notes_prompt(facts: list[Fact]) -> str:
    return "What you know about the user and their work:\n" + "\n".join(
        f.note_line() for f in facts)


def write_facts(store, facts: list[Fact]) -> int:
    """The items' notes through the store, as a user writes them: each note added, a
    revised one then updated (its old text goes to the note's revisions). The notes
    written."""
    written = 0
    for fact in facts:
        notes = [Note(fact.kind, fact.scope, fact.title, fact.body), *fact.more]
        for note in notes:
            result = store.add(title=note.title, body=note.body, kind=note.kind,
                               scope=note.scope, source="cli", has_user_message=True)
            if not result.ok:
                raise FactSetError(f"note {note.title!r} refused by the store: {result.reason}")
            written += 1
            if fact.revised and note.title == fact.title:
                revised = store.update(result.note.id, body=fact.revised, source="cli",
                                       has_user_message=True)
                if not revised.ok:
                    raise FactSetError(f"note {note.title!r}: the update was refused: "
                                       f"{revised.reason}")
    return written
