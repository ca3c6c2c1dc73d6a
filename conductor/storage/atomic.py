"""Atomic file writes, private file modes and inter-process locks.

The note files are the truth, so every write must leave either the old file or the new
one, never a torn mix: write a temp file in the same folder, fsync it, ``os.replace`` it
over the target, then fsync the folder so the rename itself survives a power cut.
"""

from __future__ import annotations

import fcntl
import os
import re
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from types import TracebackType
from typing import BinaryIO

from conductor.storage.faults import (
    AFTER_RENAME,
    BEFORE_RENAME,
    BEFORE_UNLINK,
    LINE_PARTIAL,
    TEMP_OPEN,
    TEMP_PARTIAL,
    armed_for,
    fault_point,
)

FILE_MODE = 0o600
DIR_MODE = 0o700
TEMP_SUFFIX = ".tmp"
TEMP_MAX_AGE_S = 3600.0  # a temp file of a writer we cannot tell is dead goes after an hour
# ".<target>.<writer tag>.<random>.tmp": the tag names the process that wrote it
_TEMP_TAG = re.compile(r"\.p(\d+)s(\d+)\.[^.]+\.tmp$")


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


def _start_ticks(pid: int) -> int | None:
    """When process ``pid`` started (clock ticks since boot), or None when it is gone or
    this system has no /proc. With the pid it names one process: pids are reused."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # the command name (field 2) may hold spaces and parentheses: split after its ")"
    fields = stat[stat.rindex(")") + 2:].split()
    return int(fields[19])  # field 22 of the whole line


_WRITER_TAG = f"p{os.getpid()}s{_start_ticks(os.getpid()) or 0}"


def writer_tag() -> str:
    """This process's name in its temp files' names."""
    return _WRITER_TAG


def _writer_dead(pid: int, start: int) -> bool:
    """True only when the process that wrote a temp file is surely gone."""
    if start == 0:  # written where /proc was missing: the age rule decides
        return False
    # no such process, or the pid now belongs to one started later
    return _start_ticks(pid) != start


@contextmanager
def atomic_file(path: Path, mode: int = FILE_MODE, kind: str = "file",
                durable: bool = True) -> Iterator[BinaryIO]:
    """A binary handle whose content replaces ``path`` whole when the block ends without
    an error; on an error the temp file goes and ``path`` is untouched. ``kind`` names the
    write for the crash tests' fault points (conductor.storage.faults). ``durable=False`` skips
    the fsyncs, for a cache a power cut may take back (never for the truth: notes)."""
    ensure_dir(path.parent)
    # Temp names start with a dot and end in .tmp so folder scans skip them; the writer's
    # tag lets a restart remove the leftovers of a dead process at once.
    fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.{_WRITER_TAG}.",
                                    suffix=TEMP_SUFFIX)
    try:
        fault_point(kind, TEMP_OPEN)
        with os.fdopen(fd, "wb") as handle:
            yield handle
            handle.flush()
            if durable:
                os.fsync(handle.fileno())
        os.chmod(tmp_name, mode)
        fault_point(kind, BEFORE_RENAME)
        os.replace(tmp_name, path)
    except BaseException:
        with suppress(FileNotFoundError):
            os.unlink(tmp_name)
        raise
    fault_point(kind, AFTER_RENAME)
    if durable:
        fsync_dir(path.parent)


def atomic_write(path: Path, data: str | bytes, mode: int = FILE_MODE,
                 kind: str = "file", durable: bool = True) -> None:
    """Replace ``path`` with ``data`` so that readers see the old or the new file whole."""
    payload = data.encode("utf-8") if isinstance(data, str) else data
    with atomic_file(path, mode, kind, durable) as handle:
        if armed_for(kind, TEMP_PARTIAL):  # a crash test: half the content on disk, then die
            handle.write(payload[: len(payload) // 2])
            handle.flush()
            os.fsync(handle.fileno())
            fault_point(kind, TEMP_PARTIAL)
        handle.write(payload)


def append_line(path: Path, line: str, kind: str = "file", fsync: bool = False) -> None:
    """Append one line to a log file that only its owner reads (0600 in a 0700 folder,
    whatever the umask). One write a call under an flock, so lines from two writers do not
    interleave; a torn last line a crash left (no newline) is ended first, so it spoils
    only itself and readers skip it."""
    if not line.endswith("\n"):
        line += "\n"
    data = line.encode("utf-8")
    fd = _locked_log(path)
    try:
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":
            data = b"\n" + data
        if armed_for(kind, LINE_PARTIAL):  # a crash test: half a line, then die
            os.write(fd, data[: len(data) // 2])
            os.fsync(fd)
            fault_point(kind, LINE_PARTIAL)
        os.write(fd, data)
        if fsync:
            os.fsync(fd)
    finally:
        os.close(fd)  # closing releases the flock


def _locked_log(path: Path) -> int:
    """An fd on the log at ``path`` (made 0600 if missing) under its exclusive flock.
    The file the lock was taken on is the one at ``path`` still: `rewrite_log` may have
    replaced it while this waited, and a line written to the old one would be lost."""
    ensure_dir(path.parent)
    while True:
        fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, FILE_MODE)
        try:
            os.fchmod(fd, FILE_MODE)
            fcntl.flock(fd, fcntl.LOCK_EX)
            with suppress(FileNotFoundError):
                if os.stat(path).st_ino == os.fstat(fd).st_ino:
                    return fd
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)


def rewrite_log(path: Path, change: Callable[[bytes], bytes], kind: str = "file") -> None:
    """Replace a log that `append_line` writes with ``change(its bytes)``, whole (a temp
    file renamed over it) and under the appenders' flock: a line appended meanwhile is in
    the new file, never written to the old one after it is gone."""
    fd = _locked_log(path)
    try:
        atomic_write(path, change(path.read_bytes()), kind=kind)  # the locked file
    finally:
        os.close(fd)  # closing releases the flock


def remove_file(path: Path, kind: str = "file") -> bool:
    """Unlink ``path`` and fsync its folder; False when it was already gone."""
    fault_point(kind, BEFORE_UNLINK)
    try:
        os.unlink(path)
    except FileNotFoundError:
        return False
    fsync_dir(path.parent)
    return True


def clean_temp_files(top: Path, now: float | None = None,
                     max_age_s: float = TEMP_MAX_AGE_S) -> int:
    """Remove the temp files an ended writer left under ``top``: at once when the process
    named in the file's name is gone, after ``max_age_s`` otherwise (a name without a
    tag, a process this system cannot look up). A live writer's temp file is kept: it is
    about to be renamed. Returns how many went."""
    moment = time.time() if now is None else now
    removed = 0
    for dirpath, _dirs, files in os.walk(top):
        for name in files:
            if not (name.startswith(".") and name.endswith(TEMP_SUFFIX)):
                continue
            path = Path(dirpath) / name
            tag = _TEMP_TAG.search(name)
            dead = tag is not None and _writer_dead(int(tag[1]), int(tag[2]))
            try:
                old = moment - path.stat().st_mtime > max_age_s
            except FileNotFoundError:
                continue
            if (dead or old) and remove_file(path):
                removed += 1
    return removed


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
        self._owner: int | None = None  # the thread inside the outermost `with`

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
                self._owner = threading.get_ident()
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
                fd, self._fd, self._owner = self._fd, None, None
                try:
                    fcntl.flock(fd, fcntl.LOCK_UN)
                finally:
                    os.close(fd)
        finally:
            self._thread_lock.release()

    def held_here(self) -> bool:
        """Whether the calling thread is inside this lock's ``with`` (for asserts)."""
        return self._depth > 0 and self._owner == threading.get_ident()
