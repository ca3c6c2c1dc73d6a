"""The conversation's state: the consolidation checkpoint and the replay window's start.

``state/conversation.json``. The checkpoint is the last turn the consolidation job has
folded into working memory (0: none yet); the replay window starts at or after the turn
after it, and moves only when the window outgrows its bounds (see `conversation`).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

from conductor.layers.paths import LayerFiles
from conductor.storage.atomic import atomic_write

STATE_FILE = "conversation.json"


@dataclass(frozen=True)
class ConversationState:
    checkpoint_seq: int = 0
    replay_from_seq: int = 1

    @property
    def window_start(self) -> int:
        """The first turn the prompt may replay."""
        return max(self.checkpoint_seq + 1, self.replay_from_seq)


def read_state(files: LayerFiles) -> ConversationState:
    """The saved state; the initial one when there is none or it does not parse (it is
    derived bookkeeping: the worst a lost state costs is one re-rendered prompt)."""
    try:
        raw = json.loads((files.state_dir / STATE_FILE).read_text())
        return ConversationState(checkpoint_seq=int(raw["checkpoint_seq"]),
                                 replay_from_seq=int(raw["replay_from_seq"]))
    except (OSError, ValueError, KeyError, TypeError):
        return ConversationState()


def write_state(files: LayerFiles, state: ConversationState) -> None:
    atomic_write(files.state_dir / STATE_FILE, json.dumps(asdict(state), indent=1) + "\n")
