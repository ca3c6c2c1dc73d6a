"""A user's memory layers (core, working, semantic, history) and the continuous
conversation's turns.

Part of memory's front door (`conductor.memory`): what the server may use of
`conductor/layers/`, and nothing deeper."""

from __future__ import annotations

from conductor.layers.conversation import (
    TIME_KIND,
    WindowBounds,
    conversation_messages,
    local_offset_minutes,
    time_line,
    turn_tokens,
)
from conductor.layers.core import CORE_FILES
from conductor.layers.inventory import (
    LAYER_NAMES,
    history_days,
    layer_entries,
    layer_file_path,
    summary,
)
from conductor.layers.paths import LayerFiles
from conductor.layers.turn_format import Part, Turn, TurnMessage
from conductor.layers.user_layers import UserLayers

__all__ = [
    "CORE_FILES",
    "LAYER_NAMES",
    "LayerFiles",
    "Part",
    "TIME_KIND",
    "Turn",
    "TurnMessage",
    "UserLayers",
    "WindowBounds",
    "conversation_messages",
    "history_days",
    "layer_entries",
    "layer_file_path",
    "local_offset_minutes",
    "summary",
    "time_line",
    "turn_tokens",
]
