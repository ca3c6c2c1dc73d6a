"""The fencing token's check, on the store's side (replicas: docs/serving/replicas.md).

Replicas share one notes root; a lease (conductor/memory/lease.py) makes one of them the
user's writer, and its token (etcd's revision of the lease key) rises with each new
holder. A lease alone cannot stop a writer that paused past its lease (a GC, a stalled
disk, a partition) and writes late, so the store itself checks: every write carries the
writer's token, and the highest token seen for the user is kept beside their notes
(``notes/<user>/fence.json``). A write whose token is lower is refused; a higher one is
recorded first. The user's notes, layer files and continuous history share that one
record (`fenced`): a token a note write carried fences a late history turn too, and the
other way round. The check and the write it guards run under the user's fence lock
(``locks/<user>.fence.lock``, taken inside each part's own lock, never around it), so no
other writer's record can come between them.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from conductor.storage.atomic import FileLock, atomic_write
from conductor.storage.paths import Layout

FENCE_FILE = "fence.json"
# One lock object a lock file in this process: FileLock is re-entrant within one object,
# while two objects on one file would exclude each other even in one thread.
_LOCKS: dict[Path, FileLock] = {}
_LOCKS_GUARD = threading.Lock()


class FenceRefused(Exception):
    """A write that may not happen now. ``reason``: ``lease_busy`` (another replica
    holds the user's lease: retry after ``retry_after`` seconds, or send the request to
    ``holder``) or ``stale_lease`` (a newer writer's token was seen: this one's lease is
    gone)."""

    reason = "fence_refused"

    def __init__(self, message: str, retry_after: float = 1.0, holder: str | None = None):
        super().__init__(message)
        self.retry_after = retry_after
        self.holder = holder


class StaleToken(FenceRefused):
    reason = "stale_lease"


def seen_token(user_dir: Path) -> int:
    """The highest token a write of this user carried (0 when none has)."""
    try:
        data = json.loads((user_dir / FENCE_FILE).read_text(encoding="utf-8"))
    except (FileNotFoundError, ValueError):
        return 0
    token = data.get("token") if isinstance(data, dict) else None
    return token if isinstance(token, int) and token > 0 else 0


def check_token(root: Path, user: str, token: int) -> None:
    """Refuse ``token`` (StaleToken) when a higher one was seen; record it when it is
    the highest. The caller holds the user's fence lock (`fenced`)."""
    # unlocked, a second writer's record could come between this check and the write
    assert _fence_lock(root, user).held_here(), "the fence check outside the fence lock"
    user_dir = Layout(root, user).user_dir
    if not isinstance(token, int) or token <= 0:
        raise StaleToken("a write without a fencing token", retry_after=1.0)
    seen = seen_token(user_dir)
    if token < seen:
        # the numbers only: a token says nothing about the notes
        raise StaleToken(f"fencing token {token} is older than {seen}: the lease moved on")
    if token > seen:
        atomic_write(user_dir / FENCE_FILE, json.dumps({"token": token}) + "\n",
                     kind="fence")
        # the highest token only ever rises, and the next check reads this one back
        assert seen_token(user_dir) == token, "the fence did not keep the token it let in"


def _fence_lock(root: Path, user: str) -> FileLock:
    path = root / "locks" / f"{user}.fence.lock"
    with _LOCKS_GUARD:
        lock = _LOCKS.get(path)
        if lock is None:
            lock = _LOCKS[path] = FileLock(path)
        return lock


@contextmanager
def fenced(root: Path, user: str, token: int) -> Iterator[None]:
    """Hold the user's fence lock over the write in the ``with`` block, after refusing
    ``token`` (StaleToken) when a higher one was seen by any part of the user's memory."""
    with _fence_lock(root, user):
        check_token(root, user, token)
        yield


@contextmanager
def fenced_by(root: Path, user: str, fence: Callable[[], int] | None) -> Iterator[None]:
    """`fenced` with the token `fence` hands out (the lease taken first when this replica
    has none: LeaseBusy when another holds it); no check at all when `fence` is None (one
    machine)."""
    if fence is None:
        yield
        return
    with fenced(root, user, fence()):
        yield
