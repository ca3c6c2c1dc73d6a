"""Where memory lives on disk: names that may be folders, the home, atomic writes.

Part of memory's front door (`conductor.memory`): what the server may use of
`conductor/storage/`, and nothing deeper."""

from __future__ import annotations

from conductor.storage.atomic import append_line, atomic_write, remove_file
from conductor.storage.fence import FenceRefused
from conductor.storage.paths import (
    default_home,
    default_memory_root,
    users_under,
    valid_session,
    valid_user,
)

__all__ = [
    "FenceRefused",
    "append_line",
    "atomic_write",
    "default_home",
    "default_memory_root",
    "remove_file",
    "users_under",
    "valid_session",
    "valid_user",
]
