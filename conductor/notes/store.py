"""``NoteStore``: the one door every memory feature writes through, put together."""

from __future__ import annotations

from conductor.notes.maintenance import Maintenance
from conductor.notes.model_writes import ModelWrites
from conductor.notes.reads import NoteReads
from conductor.notes.usage_counts import NoteUsage
from conductor.notes.user_writes import UserWrites


class NoteStore(ModelWrites, UserWrites, NoteReads, NoteUsage, Maintenance):
    """One user's memory notes under ``root`` (``$TANDEM_HOME/memory``)."""

    def for_user(self, user: str) -> NoteStore:
        """A store for another user under the same root, with the same clock and caps."""
        return NoteStore(self.root, user, clock=self.clock, caps=self.caps)
