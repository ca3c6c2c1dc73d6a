"""What memory's idle-time work takes from: the queues a chat turn fills on its way back
(`MemoryServices.record_turn`) and the idle-time services (server/idle/) empty while no
client waits, with the limits they run under.

Each queue is its own small class with its own calls (take a due session, put it back,
mark it done); this object only groups them, so that the server reaches them as one
declared part of memory (`MemoryServices.idle`), and a user's delete forgets them all.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from conductor.hidden.branches import BranchesDone
from conductor.hidden.prefetch import PrefetchDue, PrefetchLimits
from conductor.hidden.prewarm import PrewarmHeads, RecordsDue
from conductor.hidden.tail_notes import NotesShown
from conductor.writing.triggers import SESSION_IDLE_S, WriterTriggers


def _writer_triggers() -> WriterTriggers:
    return WriterTriggers(idle_s=float(os.environ.get("TANDEM_WRITER_IDLE_S")
                                       or SESSION_IDLE_S))


@dataclass
class IdleWork:
    """The idle-time services' queues, and the prefetch's limits."""

    # The sessions the background writer visits (server/idle/writer.py)
    triggers: WriterTriggers = field(default_factory=_writer_triggers)
    # Prefetch (server/idle/prefetch.py): the sessions due, and how much a turn
    prefetch_due: PrefetchDue = field(default_factory=PrefetchDue)
    prefetch_limits: PrefetchLimits = PrefetchLimits()
    # the notes branch-prefetched after each session's newest record (note ids only)
    prefetch_branches: BranchesDone = field(default_factory=BranchesDone)
    # The heads and shared contexts the prewarm keeps cached (server/idle/prewarm.py)
    prewarm: PrewarmHeads = field(default_factory=PrewarmHeads)
    # A hybrid-attention engine's sessions whose record the idle time prefills (off: dense)
    records_due: RecordsDue = field(default_factory=RecordsDue)

    def prewarms_branches(self, reads: bool, shown: NotesShown) -> bool:
        """The prewarm's choice for a group (`reads`: it reads memory; `shown`: the
        profile's notes_shown): whether its likely notes' branches are prefilled after its
        shared context (notes to prewarm, and notes matched and placed before the message)."""
        return self.prewarm.notes > 0 and reads and shown.leads and shown.max_matches > 0

    def prefetches_branches(self, shown: NotesShown) -> bool:
        """The prefetch's choice: whether the tails of a record's candidate notes are
        prefilled after it (branches to take, and notes placed before the message)."""
        return self.prefetch_limits.branches > 0 and shown.leads

    def forget_user(self, user: str) -> None:
        """A deleted user: nothing of theirs stays due."""
        self.triggers.forget_user(user)
        self.prefetch_due.forget_user(user)
        self.prefetch_branches.forget_user(user)
        self.prewarm.forget_user(user)
        self.records_due.forget_user(user)
