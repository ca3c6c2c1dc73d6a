"""A chat turn's memory command ("remember that ...", "forget my ..."): recognised in the
user's message and carried out, in the user's words, where memory may write; once a
message (`said`, the conversation up to it, keys a retry or a regenerate)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from conductor.ledger.records import VisibleMessage
from conductor.memory.context import MemoryContext
from conductor.memory.lease import LeaseKeeper
from conductor.notes import NoteStore
from conductor.writing.command_classifier import recognise_learned
from conductor.writing.command_writes import CommandOutcome, carry_out
from conductor.writing.commands import recognise

log = logging.getLogger("tandem.memory")


def turn_command(memory: MemoryContext, text: str | None, said: Sequence[VisibleMessage],
                 store_for: Callable[[str], NoteStore], leases: LeaseKeeper | None,
                 recogniser: str = "rules") -> CommandOutcome | None:
    """The memory command `text` opens with, carried out; None when there is none or
    memory may not write. `recogniser`: the profile's memory.command_recogniser ("rules",
    or "learned": the rules, then a classifier where they find nothing)."""
    if text is None or not memory.writes or memory.user is None:
        return None
    command = (recognise_learned if recogniser == "learned" else recognise)(text)
    if command is None:
        return None
    if leases is not None:  # replicas: only the user's writer carries it out
        leases.token(memory.user)
    outcome = carry_out(store_for(memory.user), command, session=memory.session,
                        project=memory.project, said=said)
    log.info("memory command: %s (%d note%s)", command.kind, len(outcome.note_ids),
             "" if len(outcome.note_ids) == 1 else "s")
    return outcome
