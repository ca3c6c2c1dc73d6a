"""What an explicit memory command does to the notes store, at once and in the user's words.

* **remember**: a note whose body is the user's sentence as said (only tidied: one line, a
  capital, a full stop) and whose title is its opening words; through the same rules,
  secret check, dedupe and journal as every write, then ratified (the user said it).
  A later writer run may phrase it better as a revision: the words stay in its history.
* **update**: the note the new sentence is about (its closest match in the user's notes)
  gets a ratified revision with the new words: the old one is kept in its history. With
  no such note, the sentence is remembered as a new note.
* **forget**: the note the words name is archived (the Memory screen and `tandem notes`
  restore it): a strong match only, every word the user named in the note
  (`command_targets.py`); with none, or once it is gone, nothing changes and the status
  line says "nothing to forget".
* **recall**: nothing is written; the matching notes reach the prompt as on any turn.

A message is carried out once: sent again (a retry, a regenerate: the same conversation up
to and including it, `command_repeats.py`) it changes nothing and says "already ...".
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from conductor.ledger.records import VisibleMessage
from conductor.notes import NoteStore, WriteResult
from conductor.writing.command_repeats import (
    REPEATED,
    Handled,
    HandledCommands,
    lock_for,
    message_key,
)
from conductor.writing.command_targets import forget_target
from conductor.writing.commands import Command

NOTE_KIND = "reference"
TITLE_WORDS = 10
# How much of a note's BM25 weight the command's words must cover to name it (the
# dedupe ratio, `conductor.notes.dedupe.closest`): "my locker code" names "Locker code is
# 4417"; one shared common word does not.
MATCH_AT_LEAST = 0.3


@dataclass(frozen=True)
class CommandOutcome:
    """What the command did: (verb, what) pairs for the status lines, and the notes."""

    status: tuple[tuple[str, str], ...] = ()
    note_ids: tuple[str, ...] = ()


def carry_out(store: NoteStore, command: Command, *, session: str, project: str | None,
              said: Sequence[VisibleMessage] = ()) -> CommandOutcome:
    """Apply `command` to the user's store (the caller checked memory may write).
    `said`: the conversation up to and including the user's message the command is in;
    when given, a message handled before is not carried out again."""
    if command.kind == "recall":
        return CommandOutcome()
    if not said:
        return _carry_out(store, command, session, project)
    handled = HandledCommands(store.layout.user_dir)
    key = message_key(store.user, session, project, said)
    with lock_for(handled.path):
        did = handled.lookup(key, store.clock())
        if did is not None:
            return _repeated(store, command, did)
        outcome = _carry_out(store, command, session, project)
        if outcome.note_ids:  # a refusal or a failure is not kept: the user's retry runs
            handled.record(key, store.clock(), _handled(outcome))
    return outcome


def _carry_out(store: NoteStore, command: Command, session: str,
               project: str | None) -> CommandOutcome:
    if command.kind == "forget":
        return _forget(store, command.text, project)
    if command.kind == "update":
        target = _named_note(store, command.text, project)
        if target is not None:
            return _outcome(store.edit(target, title=title_of(command.text),
                                       body=sentence(command.text), via="command"), "updated")
    return _remember(store, command.text, session, project)


def _remember(store: NoteStore, text: str, session: str,
              project: str | None) -> CommandOutcome:
    result = store.add(title=title_of(text), body=sentence(text), kind=NOTE_KIND,
                       scope="user", project=project, session=session, source="command",
                       has_user_message=True)
    if result.ok and result.note is not None and result.note.status != "ratified":
        ratified = store.ratify(result.note.id, via="command")
        if ratified.ok:
            result = WriteResult(ok=True, reason=None, note=ratified.note, op=result.op,
                                 revised_existing=result.revised_existing)
    return _outcome(result, "updated" if result.revised_existing else "remembered")


def _forget(store: NoteStore, what: str, project: str | None) -> CommandOutcome:
    target = forget_target(store, what, project)
    if target is None:
        return CommandOutcome(status=(("nothing to forget", what[:80]),))
    return _outcome(store.user_archive(target, "the user asked to forget it", via="command"),
                    "archived")


def _named_note(store: NoteStore, text: str, project: str | None) -> str | None:
    """The id of the user's live note `text` is about, if one is close enough."""
    best: tuple[str, float] | None = None
    for scope, where in (("user", None), ("project", project)):
        if scope == "project" and where is None:
            continue
        match = store.dedupe_match(title=text, scope=scope, project=where)
        if match is not None and (best is None or match[1] > best[1]):
            best = (match[0].id, match[1])
    return best[0] if best is not None and best[1] >= MATCH_AT_LEAST else None


def _handled(outcome: CommandOutcome) -> Handled:
    """The outcome as kept for a repeat: a note's id in place of its title; the reason of
    a refusal (it never holds the refused text); nothing of the user's words."""
    ids = iter(outcome.note_ids)
    return [(verb, next(ids, None), None) if verb in REPEATED else
            (verb, None, what if verb == "not remembered" else None)
            for verb, what in outcome.status]


def _repeated(store: NoteStore, command: Command, did: Handled) -> CommandOutcome:
    """What a message handled before says when it comes again: nothing done."""
    status: list[tuple[str, str]] = []
    note_ids: list[str] = []
    for verb, note_id, reason in did:
        if note_id is not None:
            note = store.get(note_id)
            if note is not None:  # a note deleted since is left out
                status.append((REPEATED.get(verb, verb), note.title))
                note_ids.append(note_id)
        else:
            status.append((verb, reason or command.text[:80]))
    return CommandOutcome(status=tuple(status), note_ids=tuple(note_ids))


def _outcome(result: WriteResult, verb: str) -> CommandOutcome:
    if result.ok and result.note is not None:
        return CommandOutcome(status=((verb, result.note.title),), note_ids=(result.note.id,))
    # refused (a secret, a cap, a full disk): the reason, never the text that was refused
    return CommandOutcome(status=(("not remembered", (result.detail or result.reason
                                                       or "refused")[:120]),))


def title_of(text: str) -> str:
    """The sentence's opening words, as the note's title."""
    words = sentence(text).rstrip(".").split()
    title = " ".join(words[:TITLE_WORDS])
    return title if len(words) <= TITLE_WORDS else f"{title}..."


def sentence(text: str) -> str:
    """The user's words, tidied: one line, a capital first letter, a closing stop."""
    text = " ".join(text.split())
    if text and text[0].islower():
        text = text[0].upper() + text[1:]
    return text if re.search(r"[.!。！]$", text) else f"{text}."
