"""One user's layers together: the files, the history store, the conversation state."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from conductor.layers.conversation import CountTokens, WindowBounds, replay_window
from conductor.layers.core import CoreFile, ensure_core, read_core
from conductor.layers.history import HistoryStore, QuarantineReport, _log_quarantine
from conductor.layers.paths import LayerFiles
from conductor.layers.semantic import ensure_semantic
from conductor.layers.state import ConversationState, read_state, write_state
from conductor.layers.turn_format import Turn
from conductor.layers.working import ensure_working_memory, read_working_memory
from conductor.storage.fence import FenceRefused, fenced_by


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

    @property
    def fence(self) -> Callable[[], int] | None:
        """Replicas: the user's fencing token for every write of theirs here (history
        turns, the conversation's state, the jobs' files); None on one machine."""
        return self.history.fence

    @fence.setter
    def fence(self, value: Callable[[], int] | None) -> None:
        self.history.fence = value

    @contextmanager
    def writing(self) -> Iterator[None]:
        """Around a write of the user's layer files: refused (FenceRefused) where this
        replica is not the user's writer."""
        with fenced_by(self.files.root, self.files.user, self.fence):
            yield

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
        with self.writing():
            write_state(self.files, state)

    def replay(self, bounds: WindowBounds, count: CountTokens) -> list[Turn]:
        """The turns the conversation's prompt replays now; moves (and saves) the window's
        start when the window outgrew its bounds."""
        state = self.state()
        turns = self.history.turns_after(state.window_start - 1)
        window, moved = replay_window(turns, state, bounds, count)
        if moved != state:
            try:
                self.save_state(moved)
            except FenceRefused:
                # replicas: another replica writes this user's layers now; the window is
                # computed the same way from the files whoever saves it
                pass
        return window

    def last_turn(self) -> Turn | None:
        last = self.history.last_seq
        return self.history.read(last) if last else None
