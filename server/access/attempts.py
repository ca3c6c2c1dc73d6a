"""Guesses of a secret, counted before they are checked: the API keys' (per key id and
address, `server.access.keys`) and the admin password's (per address, `server.access.admin`).

A check of a secret costs scrypt (tens of milliseconds), so guesses sent at once would all
be checked, and all fail, before a count taken after the check saw any of them. Here an
attempt is counted when it begins, under the lock that refuses it: with `limit` attempts
of one `who` in the window (failures, and checks still in flight), the next is refused
without a check. A check that succeeds takes its attempt back.

Guesses sent at once with the *same* secret share one check: the first runs it, the others
wait for its answer. So a client that opens with many requests under a credential not yet
verified (after a restart, after the keys file changed) runs scrypt once and is never
refused by its own requests in flight, while an attacker's different guesses each count.

The map of recent attempts is bounded: past `max_tracked` entries the one whose last
attempt is oldest is forgotten (and one whose window has passed goes first), so addresses
without end cannot grow it.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Check:
    """One check of a secret for `who`. The leader runs it and hands its answer to
    `Attempts.end`; a follower (the same secret, in flight already) waits on `answer`."""
    who: Hashable
    secret: bytes  # a digest of the secret, never the secret itself
    at: float
    prior: int  # attempts of `who` in the window before this one, those in flight included
    answer: Future
    leader: bool


class Attempts:
    """Recent attempts per `who` (hashable: an address, a (key id, address) pair)."""

    def __init__(self, limit: int, window_s: float, max_tracked: int,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.limit = limit
        self.window_s = window_s
        self.max_tracked = max_tracked
        self.clock = clock
        self._lock = threading.Lock()
        # who -> times of recent attempts; ordered by each who's last attempt, oldest first
        self._recent: OrderedDict[Hashable, list[float]] = OrderedDict()
        self._flights: dict[tuple[Hashable, bytes], Check] = {}

    def __len__(self) -> int:
        """How many `who`s are tracked (bounded by `max_tracked`)."""
        with self._lock:
            return len(self._recent)

    def locked_out(self, who: Hashable) -> bool:
        """Whether `who` has used up its attempts for now (nothing is counted)."""
        with self._lock:
            return len(self._window(who, self.clock())) >= self.limit

    def begin(self, who: Hashable, secret: bytes) -> Check | None:
        """Count an attempt of `who` with `secret` (a digest), or None when `who` is out of
        attempts. A check of the same secret already in flight is shared (not counted)."""
        with self._lock:
            flight = self._flights.get((who, secret))
            if flight is not None:
                return Check(who, secret, flight.at, flight.prior, flight.answer, False)
            now = self.clock()
            times = self._window(who, now)
            if len(times) >= self.limit:
                return None
            prior = len(times)
            times.append(now)
            self._recent[who] = times
            self._recent.move_to_end(who)
            self._forget_oldest(now)
            answer: Future = Future()
            answer.set_running_or_notify_cancel()  # a waiter's cancel cannot cancel it
            check = Check(who, secret, now, prior, answer, True)
            self._flights[(who, secret)] = check
            return check

    def end(self, check: Check, answer: Any) -> None:
        """The leader's answer (truthy: the secret was right, and its attempt is taken
        back; falsy: it stays counted). Call it whatever happened, from a `finally`."""
        if not check.leader:
            return
        with self._lock:
            if self._flights.get((check.who, check.secret)) is check:
                del self._flights[(check.who, check.secret)]
            times = self._recent.get(check.who)
            if answer and times is not None and check.at in times:
                times.remove(check.at)
                if not times:
                    del self._recent[check.who]
        check.answer.set_result(answer)

    def _window(self, who: Hashable, now: float) -> list[float]:
        """`who`'s attempts still in the window (under the lock); an empty list goes."""
        times = [t for t in self._recent.get(who, ()) if now - t < self.window_s]
        if times:
            self._recent[who] = times
        else:
            self._recent.pop(who, None)
        return times

    def _forget_oldest(self, now: float) -> None:
        """Keep at most `max_tracked` whos: those whose window has passed go first, then
        the one whose last attempt is oldest (under the lock)."""
        while self._recent:
            oldest, times = next(iter(self._recent.items()))
            if len(self._recent) <= self.max_tracked and now - times[-1] < self.window_s:
                break
            del self._recent[oldest]
