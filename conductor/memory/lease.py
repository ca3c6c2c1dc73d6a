"""One writer per user across replicas: a lease with a fencing token (README: More than
one machine).

Replicas behind the router share the notes root; each user's writer is the replica that
holds the user's lease in the coordination service (etcd: `etcd_leases.py`; in memory for
unit tests: `MemoryLeases`). A lease carries a token that rises with every new holder
(etcd's revision of the lease key), and every note write carries it to the store, which
refuses one older than the newest it has seen (conductor/storage/fence.py). The keeper
renews the leases of the users this replica serves and lets a user's lease go once they
have been quiet for `idle_s`, so their next replica takes it at once.

The service is called over the network (etcd's gateway: milliseconds, its timeout when it
is slow or gone), so never on the server's event loop: a write that runs on the loop (a
model's memory block as the answer streams) finds the lease taken ahead in a worker
thread (`ahead`), and a refusal is kept for a moment (`REFUSAL_KEPT_S`) so that the write
after it is refused without a call.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from conductor.storage.fence import FenceRefused

log = logging.getLogger("tandem.lease")
# A refusal (another holder, the service down) is answered again without a call for at
# most this long: long enough for `ahead`'s answer to serve the write right after it,
# short enough that a lease let go is taken soon after.
REFUSAL_KEPT_S = 1.0


class LeaseBusy(FenceRefused):
    """Another replica (``holder``) is the user's writer: retry after ``retry_after``."""

    reason = "lease_busy"


class LeaseUnavailable(FenceRefused):
    """The coordination service did not answer: no write can be fenced, so none is made."""

    reason = "lease_busy"


@dataclass(frozen=True)
class Lease:
    user: str
    token: int  # the fencing token: rises with every new holder of the user's lease
    lease_id: str  # the service's own id (etcd's lease ID)
    ttl_s: float


@dataclass(frozen=True)
class Held:
    """The user's lease is another's: who holds it and for how long at most."""

    holder: str
    ttl_left_s: float


class LeaseService(Protocol):
    """The coordination service as the keeper uses it (an adapter per service)."""

    def acquire(self, user: str, holder: str, ttl_s: float) -> Lease | Held:
        """The user's lease for `holder` when free, else who holds it."""

    def renew(self, lease: Lease) -> bool:
        """Keep the lease alive another ttl; False when it is gone (expired, revoked)."""

    def release(self, lease: Lease) -> None:
        """Give the lease up (its key goes with it)."""

    def revoke_holder(self, user: str, holder: str) -> bool:
        """Revoke the user's lease when `holder` holds it (a restarted replica ending
        its dead process's lease); True when one went."""


class MemoryLeases:
    """LeaseService in one process, for unit tests: the same semantics, a given clock."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._revision = 0
        self._keys: dict[str, tuple[str, str, float, float]] = {}  # user: holder, id, ttl, end
        self._lock = threading.Lock()

    def _live(self, user: str) -> tuple[str, str, float, float] | None:
        entry = self._keys.get(user)
        if entry is not None and entry[3] <= self.clock():
            del self._keys[user]
            return None
        return entry

    def acquire(self, user: str, holder: str, ttl_s: float) -> Lease | Held:
        with self._lock:
            entry = self._live(user)
            if entry is not None:
                return Held(entry[0], entry[3] - self.clock())
            self._revision += 1
            lease_id = f"m{self._revision}"
            self._keys[user] = (holder, lease_id, ttl_s, self.clock() + ttl_s)
            return Lease(user, self._revision, lease_id, ttl_s)

    def renew(self, lease: Lease) -> bool:
        with self._lock:
            entry = self._live(lease.user)
            if entry is None or entry[1] != lease.lease_id:
                return False
            self._keys[lease.user] = (*entry[:3], self.clock() + entry[2])
            return True

    def release(self, lease: Lease) -> None:
        with self._lock:
            entry = self._keys.get(lease.user)
            if entry is not None and entry[1] == lease.lease_id:
                del self._keys[lease.user]

    def revoke_holder(self, user: str, holder: str) -> bool:
        with self._lock:
            entry = self._live(user)
            if entry is None or entry[0] != holder:
                return False
            del self._keys[user]
            return True


@dataclass
class _Kept:
    lease: Lease
    renewed: float  # when the service last confirmed it (monotonic)
    used: float  # when a write last needed it


class LeaseKeeper:
    """This replica's leases: taken on a user's first write, renewed while the user is
    served, let go when they have been quiet for `idle_s`."""

    def __init__(self, service: LeaseService, holder: str, ttl_s: float = 10.0,
                 idle_s: float = 60.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.service = service
        self.holder = holder
        self.ttl_s = ttl_s
        self.idle_s = idle_s
        self.clock = clock
        self._kept: dict[str, _Kept] = {}
        self._last_token: dict[str, int] = {}  # user: the token of this keeper's last lease
        self._refused: dict[str, tuple[float, FenceRefused]] = {}  # user: (until, refusal)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def token(self, user: str) -> int:
        """The user's fencing token, the lease taken first when this replica has none;
        LeaseBusy when another replica holds it, LeaseUnavailable when the service is
        down. A lease is used only while a third of its ttl is left by this replica's
        own clock, so a renewal that stalled never lets a write past the expiry."""
        now = self.clock()
        with self._lock:
            kept = self._kept.get(user)
            if kept is not None and now - kept.renewed < self.ttl_s * 2 / 3:
                assert kept.lease.user == user, "a lease kept under another user's name"
                kept.used = now
                return kept.lease.token
            if kept is not None:
                del self._kept[user]
            refused = self._refused.get(user)
            if refused is not None and refused[0] > now:
                exc = refused[1]  # the same answer, a fresh exception (no old traceback)
                raise type(exc)(str(exc), retry_after=exc.retry_after, holder=exc.holder)
        try:
            return self._acquire(user, now)
        except FenceRefused as exc:
            with self._lock:
                self._refused[user] = (now + min(REFUSAL_KEPT_S, exc.retry_after), exc)
            raise

    def _acquire(self, user: str, now: float) -> int:
        try:
            got = self.service.acquire(user, self.holder, self.ttl_s)
            if isinstance(got, Held) and got.holder == self.holder:
                # this replica's name holds it but this process keeps no lease of it:
                # the process before a restart (gone), or a renewal this one gave up
                # on; either way it goes now rather than after its ttl, and the next
                # lease's token is higher
                if self.service.revoke_holder(user, self.holder):
                    got = self.service.acquire(user, self.holder, self.ttl_s)
        except OSError as exc:
            raise LeaseUnavailable(f"the coordination service did not answer: {exc}",
                                   retry_after=1.0) from None
        if isinstance(got, Held):
            raise LeaseBusy(f"the user's writer is {got.holder}",
                            retry_after=max(1.0, got.ttl_left_s), holder=got.holder)
        with self._lock:
            # every new holder's token is higher, this replica's own next lease too: a
            # lower one would let the store take a late write of the lease before it
            assert got.token > self._last_token.get(user, 0), "a lease token that fell"
            self._last_token[user] = got.token
            self._kept[user] = _Kept(got, now, now)
            self._refused.pop(user, None)
        log.info("lease taken, token %d", got.token)
        return got.token

    def fresh(self, user: str) -> bool:
        """Whether `token` would answer from the kept lease, without a call."""
        with self._lock:
            kept = self._kept.get(user)
            return kept is not None and self.clock() - kept.renewed < self.ttl_s * 2 / 3

    async def ahead(self, user: str) -> None:
        """Take (or take again) the user's lease in a worker thread, off the event loop,
        so that a write on the loop right after finds it kept; a refusal is not raised
        here but kept for the write to meet (`token`), without a second call."""
        if self.fresh(user):
            return
        with contextlib.suppress(FenceRefused):
            await asyncio.to_thread(self.token, user)

    def held(self) -> dict[str, int]:
        """The users whose lease this replica holds, and each token."""
        with self._lock:
            return {user: kept.lease.token for user, kept in self._kept.items()}

    def tick(self) -> None:
        """Renew each lease of a user served lately; let go of the rest."""
        now = self.clock()
        with self._lock:
            kept = list(self._kept.items())
            self._refused = {u: r for u, r in self._refused.items() if r[0] > now}
        for user, entry in kept:
            if now - entry.used >= self.idle_s:
                self._drop(user, entry)
                continue
            try:
                alive = self.service.renew(entry.lease)
            except OSError:
                continue  # the next tick tries again; `token` stops using it in time
            if alive:
                entry.renewed = self.clock()
            else:
                with self._lock:
                    self._kept.pop(user, None)

    def _drop(self, user: str, entry: _Kept) -> None:
        with self._lock:
            self._kept.pop(user, None)
        try:
            self.service.release(entry.lease)
        except OSError:
            pass  # it expires by its ttl

    def start(self) -> None:
        """Renew in a thread of its own, three times a ttl."""
        def run() -> None:
            while not self._stop.wait(self.ttl_s / 3):
                self.tick()
        self._thread = threading.Thread(target=run, name="tandem-leases", daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Stop renewing and give every lease up, so the users' next replica writes at
        once."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        with self._lock:
            kept = list(self._kept.items())
        for user, entry in kept:
            self._drop(user, entry)
