"""The plain data a chat turn and memory's front door hand each other, in one module (as
vLLM's core/sched/output.py holds what its scheduler hands the model runner).

A turn calls memory flat, as vLLM's engine calls its scheduler (`schedule()`, then
`update_from_output()`), and memory never calls the server back:

* `MemoryServices.begin_turn(facts) -> TurnMemory`: the request's
  `TurnFacts` in; out, what the layout reads of memory (the ledger's match, the shown
  answers, the matched record's deleted notes) and the hiding decision bound to this
  turn (`TurnMemory.hidden`), which the server asks for each layout it tries.
* the server lays the prompt out (render, replay, fit and the room check:
  server/turn/fit.py) and counts the hidden parts it added for /metrics.
* `MemoryServices.admit_turn(turn, LaidTurn) -> TurnPlan`: the layout that stands (the
  request is valid) as plain data; memory notes a miss and carries out a memory command;
  the plan holds the command's outcome and the cache salt.
* `MemoryServices.record_turn(outcome: TurnOutcome)`: after the answer (or when the
  client leaves), the ledger's record, the shown answer, the prewarm's head, the notes
  injected, the prefetch's and the writer's triggers.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from conductor.ledger.records import Match, Span, VisibleMessage
from conductor.memory.context import MemoryContext
from conductor.writing.command_writes import CommandOutcome


# -- the hiding decision's plain data (conductor/memory/hiding.py decides it) ----------
@dataclass(frozen=True)
class Tail:
    """A hidden system message: the shared context after the head, or a tail right after
    the turn's new messages (the session's tail, matching notes), or right before them
    (`leads`: the matching notes, placed before the message they match)."""

    kind: str
    text: str
    note_ids: tuple[str, ...] = ()
    versions: tuple[int, ...] = ()  # a correction's (conductor/hidden/corrections.py)
    leads: bool = False


class Replayed(Protocol):
    """The part of a ledger record a prompt starts with (the server's `Replay`)."""

    ids: Sequence[int]  # the record's ids kept
    spans: tuple[Span, ...]  # its hidden spans among them
    dropped: tuple[Span, ...]  # its hidden spans past the cut


@dataclass
class HiddenContext:
    token: str | None = None  # the session's memory-routes token, when memory is on for it
    head: Tail | None = None  # the shared context, placed after the system prompt and tools
    tails: list[Tail] = field(default_factory=list)  # around the new messages (Tail.leads)
    version: str | None = None  # the shared context's version, when the head carries it
    # No head because the shared context had nothing to show (no card for the request, no
    # note to list), not because it gave way to fit: a replay keeps the record as it is
    # (server/turn/fit.py). False: a head, or one left out to fit.
    shared_empty: bool = False
    # The notes an index would list now (the request's user's and project's, live), when
    # the shared context holds an index; a replay made without one re-lays out past a bound
    index_notes: int = 0


# -- the turn's calls ------------------------------------------------------------------
@dataclass(frozen=True)
class TurnFacts:
    """What memory reads of a request, as plain values (the turn computes them)."""

    last_message: str  # the text of the request's last message (the user's, when it is)
    client_tools: bool  # the client offered tools of its own (not only the engine's)
    memory: MemoryContext | None = None  # who, which session, memory's mode
    visible: tuple[VisibleMessage, ...] = ()  # the messages as the ledger matches them
    tools_message: bool = False  # the render opens with the tools' pseudo-message
    # The user's newest message, when it may open with a memory command (the request ends
    # with it and the profile takes commands); None otherwise.
    command_text: str | None = None
    counting: bool = False  # laid out to be counted only: nothing a turn sets off happens


@dataclass(frozen=True)
class TurnMemory:
    """What the turn's layout reads of memory (`begin_turn`), held by the server until it
    hands the layout back (`admit_turn`)."""

    match: Match | None  # the ledger's record sharing the longest run of messages
    as_written: Callable[[str], str]  # an answer without the status lines the server added
    deleted: frozenset[str]  # notes the matched record holds that are gone (not replayed)
    shows_shared: bool  # this request would get a shared context (the card, or an index)
    # The hiding decision for this turn, given the replayed part of the record (None: the
    # prompt is rendered whole); memory reads the replayed notes back itself
    hidden: Callable[[Replayed | None], HiddenContext]
    facts: TurnFacts  # the request's, as begin_turn was given them


@dataclass(frozen=True)
class LaidTurn:
    """The layout the turn chose (server/turn/fit.py's `Layout`), as memory reads it."""

    visible: tuple[VisibleMessage, ...]  # the messages laid out, as the ledger matches them
    missed: bool  # the prompt is not the whole record replayed (a new session, a miss, an edit)


@dataclass(frozen=True)
class TurnPlan:
    """What the turn takes from memory on its way to the engine."""

    command: CommandOutcome | None  # the memory command carried out, if any
    salt: str  # the user's prefix-cache salt


@dataclass(frozen=True)
class TurnOutcome:
    """What memory records of a turn once it is answered (or the client left)."""

    memory: MemoryContext
    request_id: str
    # False: the client left before any answer: nothing to record, the writer looks
    recorded: bool = True
    messages: tuple[VisibleMessage, ...] = ()  # the visible messages, the answer last
    ids: tuple[int, ...] = ()  # the prompt's ids, then the answer's
    spans: tuple[Span, ...] = ()  # the hidden spans among them
    ended_cleanly: bool = False
    shown: str = ""  # the answer as the client was shown it (status lines included)
    written: str = ""  # the model's own text of it
    ledger_kept: bool = True  # False: answered and counted, not a record
    hidden: tuple[Tail, ...] = ()  # what this turn hid: the shared context and tails
    shared_version: str | None = None  # the shared context's version, when it carried it
    shared_empty: bool = False  # laid out without one: it had nothing to show (HiddenContext)
    head_checkpointed: bool = True  # False: a hybrid model's fresh layout, to prewarm
    blocks_written: bool = False  # the answer held back blocks: notes may be written
    new_tokens: int = 0  # ids the engine read or wrote that the ledger did not replay
    gave_up: bool = False  # the client left mid-answer: the writer looks at the session
