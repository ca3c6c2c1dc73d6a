"""Writes that need not be done before their caller goes on: one thread does them, batched.

The bookkeeping after an answer (the notes that went in counted in `usage.json`, the
journal's entries of it) was done per answer in the event loop's default executor: a few
threads that the turn's own work (prepare, a key's check) waits for too. Each held one of
them through an fsync'd rewrite of the whole book and an fsync'd journal line, and held
the GIL for the book's JSON, so under 32 clients a turn queued behind them and the loop
stalled beside them (issue 58, item 4).

Here a caller keeps its part in memory and names a flush with `later(key, flush)`; the one
thread runs each named flush once for however many parts were kept before it ran (one
book rewrite and one journal write for a batch of answers). A flush takes its parts under
its own lock, so running it twice, or from a reader's thread (`drain`: a read that must
see the writes, the process's exit), loses nothing and writes nothing twice.
"""

from __future__ import annotations

import atexit
import logging
import threading
from collections.abc import Callable, Hashable

log = logging.getLogger("tandem.storage")


class WriteBehind:
    """One thread that runs queued flushes in the order first queued, each once a batch."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._due: dict[Hashable, Callable[[], None]] = {}  # key -> flush, oldest first
        self._running: dict[Hashable, int] = {}  # key -> its flushes running now
        self._lock = threading.Condition()
        self._thread: threading.Thread | None = None
        self.failures = 0  # flushes that raised (each logged)

    def later(self, key: Hashable, flush: Callable[[], None]) -> None:
        """Run `flush` soon, on the thread; once however often `key` is queued before."""
        with self._lock:
            self._due.setdefault(key, flush)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
                self._thread.start()
            self._lock.notify_all()

    def drain(self, key: Hashable | None = None) -> None:
        """Run now, in this thread, what is queued (`key`'s flush only, when given), and
        wait for the same flushes the thread is running: afterwards every part kept
        before this call is written. A caller must not hold a lock its flush takes."""
        with self._lock:
            keys = list(self._due) if key is None else [key] if key in self._due else []
            due = [(k, self._due.pop(k)) for k in keys]
            for k, _ in due:
                self._running[k] = self._running.get(k, 0) + 1
        for k, flush in due:
            self._flush(k, flush)
        with self._lock:
            self._lock.wait_for(lambda: not self._running if key is None
                                else key not in self._running)

    def _run(self) -> None:
        while True:
            with self._lock:
                self._lock.wait_for(lambda: bool(self._due))
                key = next(iter(self._due))
                flush = self._due.pop(key)
                self._running[key] = self._running.get(key, 0) + 1
            self._flush(key, flush)

    def _flush(self, key: Hashable, flush: Callable[[], None]) -> None:
        try:
            flush()
        except Exception:  # the caller went on long ago: say so, and go on with the rest
            self.failures += 1
            log.exception("a write-behind flush failed (%s)", self.name)
        finally:
            with self._lock:
                self._running[key] -= 1
                if not self._running[key]:
                    del self._running[key]
                self._lock.notify_all()


# The after-answer bookkeeping's thread, drained when the process exits normally.
AFTER_ANSWER = WriteBehind("tandem-after-answer")
atexit.register(AFTER_ANSWER.drain)
