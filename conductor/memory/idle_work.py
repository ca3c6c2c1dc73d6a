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

    def forget_user(self, user: str) -> None:
        """A deleted user: nothing of theirs stays due."""
        self.triggers.forget_user(user)
        self.prefetch_due.forget_user(user)
        self.prefetch_branches.forget_user(user)
        self.prewarm.forget_user(user)
        self.records_due.forget_user(user)
