"""One user's layers together: the files, the history store, the conversation state."""

from __future__ import annotations

import threading
from pathlib import Path

from conductor.layers.conversation import CountTokens, WindowBounds, replay_window
from conductor.layers.core import CoreFile, ensure_core, read_core
from conductor.layers.history import HistoryStore, QuarantineReport, _log_quarantine
from conductor.layers.paths import LayerFiles
from conductor.layers.semantic import ensure_semantic
from conductor.layers.state import ConversationState, read_state, write_state
from conductor.layers.turn_format import Turn
from conductor.layers.working import ensure_working_memory, read_working_memory


class UserLayers:
    def __init__(self, root: Path, user: str,
                 on_quarantine: QuarantineReport = _log_quarantine) -> None:
        self.files = LayerFiles(root, user)
        self.history = HistoryStore(self.files, on_quarantine)
        self._ensured = False
        self._lock = threading.Lock()

    @property
    def user(self) -> str:
        return self.files.user

    def ensure(self) -> None:
        """Create the layers from their templates on first use (core only when its folder
        has never existed: an operator's edit or removal stands)."""
        with self._lock:
            if self._ensured:
                return
            ensure_core(self.files)
            ensure_working_memory(self.files)
            ensure_semantic(self.files)
            self._ensured = True

    def core(self) -> list[CoreFile]:
        return read_core(self.files)

    def working_memory(self) -> str:
        return read_working_memory(self.files)

    def state(self) -> ConversationState:
        return read_state(self.files)

    def save_state(self, state: ConversationState) -> None:
        write_state(self.files, state)

    def replay(self, bounds: WindowBounds, count: CountTokens) -> list[Turn]:
        """The turns the conversation's prompt replays now; moves (and saves) the window's
        start when the window outgrew its bounds."""
        state = self.state()
        turns = self.history.turns_after(state.window_start - 1)
        window, moved = replay_window(turns, state, bounds, count)
        if moved != state:
            self.save_state(moved)
        return window

    def last_turn(self) -> Turn | None:
        last = self.history.last_seq
        return self.history.read(last) if last else None
