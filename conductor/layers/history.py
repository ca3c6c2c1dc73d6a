"""The history layer: one JSON file a turn under ``history/turns/YYYY/MM/DD/<seq>.json``.

Appended every turn, never rewritten, never deleted. A file that does not parse is moved
to ``history/quarantine/`` (kept as it was) and reported, never fatal; a turn of an older
schema is upgraded on read (the file stays as written). Files are immutable, so a parsed
turn is cached by its sequence number.

An append is two steps, so the server never waits on a disk on the request path: `reserve`
numbers the turn and makes it readable at once (the user's next message may come before
the file is down), `write` puts the file down in a worker thread. One server writes a
user's history; other processes (the CLI) only read it. With replicas, that server is the
one holding the user's lease: each file goes down under its fencing token, and a stale
writer's late turn is refused (`fence`, conductor/storage/fence.py).
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path

from conductor.layers.paths import LayerFiles
from conductor.layers.turn_format import NewerSchemaError, Turn, TurnFormatError, parse_turn
from conductor.storage.atomic import FileLock, atomic_write, ensure_dir, fsync_dir
from conductor.storage.fence import fenced_by
from conductor.storage.journal import Journal

log = logging.getLogger("tandem.layers")

# (file name relative to the turns folder, reason) for every turn file set aside
QuarantineReport = Callable[[str, str], None]


def _log_quarantine(name: str, reason: str) -> None:
    log.warning("history turn %s set aside: %s", name, reason)


def journaled_quarantine(journal: Journal, user: str) -> QuarantineReport:
    """A report that logs a set-aside turn and writes it to `journal` under `user`: file
    names and reasons only, a turn's text never reaches the journal."""
    def report(name: str, reason: str) -> None:
        _log_quarantine(name, reason)
        try:
            journal.append(op="history_quarantine", user=user, id=name[:200],
                           reason=reason[:200].replace("\n", " "))
        except (OSError, ValueError):
            log.warning("journal not written for a set-aside turn")
    return report


class HistoryStore:
    """One user's turns: append, read by sequence number, page backwards."""

    def __init__(self, files: LayerFiles, on_quarantine: QuarantineReport = _log_quarantine):
        self.files = files
        self._on_quarantine = on_quarantine
        self._lock = FileLock(files.lock_path)
        self._mutex = threading.RLock()
        self._paths: dict[int, Path] | None = None  # seq -> file, from one scan
        self._cache: dict[int, Turn] = {}
        self._pending: dict[int, Turn] = {}  # reserved, file not written yet
        # Replicas (conductor/memory/lease.py): the user's fencing token, taken at each
        # write; None on one machine, where no write is fenced.
        self.fence: Callable[[], int] | None = None

    # -- reading ---------------------------------------------------------------------------
    def _index(self) -> dict[int, Path]:
        with self._mutex:
            if self._paths is None:
                self._paths = self._scan()
            return self._paths

    def _scan(self) -> dict[int, Path]:
        paths: dict[int, Path] = {}
        if not self.files.turns_dir.is_dir():
            return paths
        for folder, _dirs, names in os.walk(self.files.turns_dir):
            for name in names:
                if name.startswith("."):  # a temp file of a write in flight
                    continue
                path = Path(folder) / name
                stem = name.removesuffix(".json")
                if not name.endswith(".json") or not stem.isdigit():
                    self._quarantine(path, "not a turn file name")
                    continue
                if int(stem) in paths:
                    self._quarantine(path, "a second file for its seq")
                    continue
                paths[int(stem)] = path
        return paths

    def paths(self) -> dict[int, Path]:
        """Each written turn's file by seq (a turn's folder is its UTC day)."""
        return dict(self._index())

    @property
    def last_seq(self) -> int:
        """The highest sequence number given out; 0 before the first turn."""
        return max(self.seqs(), default=0)

    def seqs(self) -> list[int]:
        with self._mutex:
            return sorted({*self._index(), *self._pending})

    def read(self, seq: int) -> Turn | None:
        """The turn, or None when it is not there or was set aside as unreadable."""
        with self._mutex:
            if seq in self._cache:
                return self._cache[seq]
            path = self._index().get(seq)
            if path is None:
                return None
            try:
                turn = parse_turn(json.loads(path.read_bytes()))
                if turn.seq != seq:
                    raise TurnFormatError(f"its seq {turn.seq} is not its file name's")
            except NewerSchemaError as exc:
                self._on_quarantine(self._relative(path), f"left in place: {exc}")
                del self._index()[seq]
                return None
            except (ValueError, OSError) as exc:  # JSONDecodeError and TurnFormatError too
                reason = str(exc) if isinstance(exc, TurnFormatError) else type(exc).__name__
                self._quarantine(path, reason)
                del self._index()[seq]
                return None
            self._cache[seq] = turn
            return turn

    def turns_after(self, seq: int) -> list[Turn]:
        """Every readable turn with a higher sequence number, oldest first."""
        return [t for s in self.seqs() if s > seq and (t := self.read(s)) is not None]

    def page(self, before: int | None, limit: int) -> list[Turn]:
        """Up to `limit` readable turns before `before` (None: the newest), oldest first."""
        out: list[Turn] = []
        for s in reversed(self.seqs()):
            if len(out) >= limit:
                break
            if before is not None and s >= before:
                continue
            turn = self.read(s)
            if turn is not None:
                out.append(turn)
        return out[::-1]

    # -- writing ---------------------------------------------------------------------------
    def append(self, make_turn: Callable[[int], Turn]) -> Turn:
        """Number, then write, the next turn (`make_turn(seq)` builds it)."""
        turn = self.reserve(make_turn)
        self.write(turn)
        return turn

    def reserve(self, make_turn: Callable[[int], Turn]) -> Turn:
        """The next turn, numbered and readable now; `write` puts its file down."""
        with self._mutex:
            turn = make_turn(self.last_seq + 1)
            self._cache[turn.seq] = turn
            self._pending[turn.seq] = turn
            return turn

    def replace(self, turn: Turn) -> Turn:
        """`turn` in the place of the turn of its number (a regenerated answer), readable
        now; `write` puts its file down over the old one (same number, same day)."""
        with self._mutex:
            self._cache[turn.seq] = turn
            self._pending[turn.seq] = turn
            return turn

    def write(self, turn: Turn) -> None:
        """The reserved turn's file, written atomically (it may run in a worker thread).
        A turn replaced meanwhile is not written: its replacement is what stays."""
        path = self._path_for(turn)
        with self._lock:
            with self._mutex:
                if self._cache.get(turn.seq, turn) is not turn:
                    return
            # FenceRefused (LeaseBusy, StaleToken) when this replica is not the writer
            with fenced_by(self.files.root, self.files.user, self.fence):
                atomic_write(path, json.dumps(turn.to_json(), ensure_ascii=False,
                                              indent=1) + "\n", kind="history")
        with self._mutex:
            self._index()[turn.seq] = path
            self._pending.pop(turn.seq, None)

    def _path_for(self, turn: Turn) -> Path:
        day = turn.time.strftime("%Y/%m/%d")
        return self.files.turns_dir / day / f"{turn.seq:08d}.json"

    def _relative(self, path: Path) -> str:
        return str(path.relative_to(self.files.turns_dir))

    def _quarantine(self, path: Path, reason: str) -> None:
        """Move an unreadable file aside, keeping its relative path; never delete it."""
        target = self.files.quarantine_dir / path.relative_to(self.files.turns_dir)
        n = 1
        while target.exists():
            target = target.with_name(f"{path.name}.{n}")
            n += 1
        ensure_dir(target.parent)
        os.replace(path, target)
        fsync_dir(path.parent)
        fsync_dir(target.parent)
        self._on_quarantine(self._relative(path), reason)

    def quarantined(self) -> list[str]:
        """The files set aside so far, relative to the quarantine folder."""
        folder = self.files.quarantine_dir
        if not folder.is_dir():
            return []
        return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())
