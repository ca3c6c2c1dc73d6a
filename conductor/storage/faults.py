"""Fault injection for the crash tests: die, or fail a write, at one named point.

Every kind of write (a note, its revision, an archive move, INDEX.md, usage.json, a
journal line, a history turn, a job artifact, the search index's sync...) calls
``fault_point(kind, point)`` between its steps. A test starts a child process with

    TANDEM_FAULT=<kind>:<point>[:<action>]

and the child, on reaching that point, is killed with SIGKILL (``kill``, the default: as
an out-of-memory kill or a power cut would end it) or has the write fail with ENOSPC
(``enospc``: the disk is full) or EROFS (``erofs``: the folder turned read-only). Without
the variable, which is always so outside the tests, a call compares one string.
"""

from __future__ import annotations

import errno
import os
import signal

FAULT_ENV = "TANDEM_FAULT"
ACTIONS = ("kill", "enospc", "erofs")

# The steps of an atomic write, in order (conductor.storage.atomic.atomic_file):
TEMP_OPEN = "temp_open"            # the temp file exists, empty
TEMP_PARTIAL = "temp_partial"      # half the new content written to the temp file
BEFORE_RENAME = "before_rename"    # the temp file whole and fsync'd, not yet renamed
AFTER_RENAME = "after_rename"      # renamed over the target, the folder not yet fsync'd
BEFORE_UNLINK = "before_unlink"    # a file about to be removed (the old name of a move)
LINE_PARTIAL = "line_partial"      # half a log line appended, no newline yet


def _armed(spec: str | None) -> tuple[str, str, str] | None:
    if not spec:
        return None
    kind, _, rest = spec.partition(":")
    point, _, action = rest.partition(":")
    action = action or "kill"
    if action not in ACTIONS:
        raise ValueError(f"{FAULT_ENV}: action {action!r} is not one of {ACTIONS}")
    return kind, point, action


_ARMED = _armed(os.environ.get(FAULT_ENV))  # read once: a child's parent sets it


def arm(spec: str | None) -> None:
    """Arm (with None, disarm) a fault in this process: the in-process tests' way."""
    global _ARMED
    _ARMED = _armed(spec)


def fault_point(kind: str, point: str) -> None:
    """Die or fail here when the armed fault names this kind and point."""
    if _ARMED is None or _ARMED[0] != kind or _ARMED[1] != point:
        return
    action = _ARMED[2]
    if action == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    code = errno.ENOSPC if action == "enospc" else errno.EROFS
    raise OSError(code, os.strerror(code))


def armed_for(kind: str, point: str) -> bool:
    """Whether the armed fault is this one (a write that must stop half-way asks)."""
    return _ARMED is not None and _ARMED[0] == kind and _ARMED[1] == point
