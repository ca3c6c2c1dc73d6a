"""Atomic file writes, private file modes and inter-process locks.

The note files are the truth, so every write must leave either the old file or the new
one, never a torn mix: write a temp file in the same folder, fsync it, ``os.replace`` it
over the target, then fsync the folder so the rename itself survives a power cut.
"""

from __future__ import annotations

import fcntl
import os
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from types import TracebackType
from typing import BinaryIO

FILE_MODE = 0o600
DIR_MODE = 0o700
TEMP_SUFFIX = ".tmp"


def ensure_dir(path: Path) -> Path:
    """Create ``path`` and any missing parents with mode 0700 (umask does not apply)."""
    missing: list[Path] = []
    probe = path
    while not probe.exists():
        missing.append(probe)
        probe = probe.parent
    for folder in reversed(missing):
        with suppress(FileExistsError):
            os.mkdir(folder, DIR_MODE)
        # mkdir's mode is filtered by the umask; chmod is not.
        os.chmod(folder, DIR_MODE)
    return path


def make_private(path: Path) -> None:
    """Give a folder tree another library wrote (Qdrant's shard files) the store's modes:
    folders 0700, files 0600, whatever the umask was when it wrote them. Links are left
    alone; an entry that goes while the walk runs (the engine's own renames) is skipped."""
    if path.is_symlink() or not path.is_dir():
        return
    for dirpath, _dirs, filenames in os.walk(path):
        with suppress(FileNotFoundError):
            os.chmod(dirpath, DIR_MODE)
        for name in filenames:
            entry = os.path.join(dirpath, name)
            if not os.path.islink(entry):
                with suppress(FileNotFoundError):
                    os.chmod(entry, FILE_MODE)


def fsync_dir(path: Path) -> None:
    """Flush a folder's entries (renames, unlinks) to disk."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextmanager
def atomic_file(path: Path, mode: int = FILE_MODE) -> Iterator[BinaryIO]:
    """A binary handle whose content replaces ``path`` whole when the block ends without
    an error; on an error the temp file goes and ``path`` is untouched."""
    ensure_dir(path.parent)
    # Temp names start with a dot and end in .tmp so folder scans skip them.
    fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=TEMP_SUFFIX)
    try:
        with os.fdopen(fd, "wb") as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp_name, mode)
        os.replace(tmp_name, path)
    except BaseException:
        with suppress(FileNotFoundError):
            os.unlink(tmp_name)
        raise
    fsync_dir(path.parent)


def atomic_write(path: Path, data: str | bytes, mode: int = FILE_MODE) -> None:
    """Replace ``path`` with ``data`` so that readers see the old or the new file whole."""
    payload = data.encode("utf-8") if isinstance(data, str) else data
    with atomic_file(path, mode) as handle:
        handle.write(payload)


def append_private(path: Path, text: str) -> None:
    """Append to a log file that only its owner reads (0600 in a 0700 folder, whatever
    the umask); one write a call, so lines from two writers do not interleave."""
    ensure_dir(path.parent)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, FILE_MODE)
    try:
        os.fchmod(fd, FILE_MODE)
        os.write(fd, text.encode("utf-8"))
    finally:
        os.close(fd)


def remove_file(path: Path) -> bool:
    """Unlink ``path`` and fsync its folder; False when it was already gone."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        return False
    fsync_dir(path.parent)
    return True


class FileLock:
    """An exclusive ``flock`` on a lock file, re-entrant within one object.

    flock locks belong to an open file description, so two objects (in one process or
    in two) that open the same lock file exclude each other; threads sharing one object
    are serialised by the RLock, and nested ``with`` blocks in one thread are allowed.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._thread_lock = threading.RLock()
        self._depth = 0
        self._fd: int | None = None

    def __enter__(self) -> FileLock:
        self._thread_lock.acquire()
        try:
            if self._depth == 0:
                ensure_dir(self.path.parent)
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT, FILE_MODE)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX)
                except BaseException:
                    os.close(fd)
                    raise
                self._fd = fd
            self._depth += 1
        except BaseException:
            self._thread_lock.release()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            self._depth -= 1
            if self._depth == 0 and self._fd is not None:
                fd, self._fd = self._fd, None
                try:
                    fcntl.flock(fd, fcntl.LOCK_UN)
                finally:
                    os.close(fd)
        finally:
            self._thread_lock.release()
