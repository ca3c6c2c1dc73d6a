"""The nightly job: regenerate INDEX.md, delete archives older than 30 days, mark notes
past ``verify_by`` stale, clear crash leftovers. Run by hand with ``tandem notes nightly``;
the server runs ``nightly_loop`` once a day at a configurable hour.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from pathlib import Path

from conductor.notes import NoteStore
from conductor.notes.note_format import utc_now
from conductor.storage.paths import users_under

log = logging.getLogger(__name__)

DEFAULT_HOUR = 3


@dataclass
class NightlyReport:
    """What one nightly run did for one user."""

    user: str
    archives_deleted: int = 0
    marked_stale: int = 0
    leftovers_removed: int = 0
    live_notes: int = 0


def run_nightly(store: NoteStore, now: datetime | None = None) -> NightlyReport:
    """One nightly pass over one user's tree, journaled as ``nightly``."""
    moment = now or store.clock()
    report = NightlyReport(store.user)
    report.archives_deleted = store.purge_archives(moment)
    report.marked_stale = store.mark_stale(moment)
    report.leftovers_removed = store.clean_leftovers(moment)
    store.regenerate_index(moment)
    report.live_notes = len(store.list())
    counts = {k: v for k, v in asdict(report).items() if k != "user"}
    store.log_nightly(counts)
    return report


def run_nightly_all(
    root: Path, now: datetime | None = None, clock: Callable[[], datetime] = utc_now
) -> list[NightlyReport]:
    """The nightly pass for every user under a memory root; one user's failure is logged
    and does not stop the others."""
    reports = []
    for user in users_under(root):
        try:
            reports.append(run_nightly(NoteStore(root, user, clock=clock), now))
        except Exception:  # noqa: BLE001 - keep going for the other users
            log.exception("nightly run failed for user %s", user)
    return reports


def seconds_until(hour: int, now: datetime | None = None, minute: int = 0) -> float:
    """Seconds from ``now`` to the next ``hour:minute`` (always > 0).

    An aware ``now`` is read in its own time zone; the default is the local time.
    """
    if not (0 <= hour <= 23 and 0 <= minute <= 59):
        raise ValueError("hour must be 0-23 and minute 0-59")
    moment = now or datetime.now().astimezone()
    target = moment.replace(hour=hour, minute=minute, second=0, microsecond=0)
    if target <= moment:
        target += timedelta(days=1)
    return (target - moment).total_seconds()


async def nightly_loop(
    root: Path,
    hour: int = DEFAULT_HOUR,
    *,
    clock: Callable[[], datetime] = utc_now,
    sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
    runs: int | None = None,
) -> None:
    """Run ``run_nightly_all`` every day at ``hour`` (local time) until cancelled.

    The file work runs in a thread so the server's event loop keeps serving. ``runs``
    stops after that many passes (for tests).
    """
    done = 0
    while runs is None or done < runs:
        await sleep(seconds_until(hour))
        await asyncio.to_thread(run_nightly_all, root, None, clock)
        done += 1
