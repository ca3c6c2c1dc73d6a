"""Schedules as UTC hours of the day: the latest slot at or before a moment."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta


def last_slot(hours: Sequence[int], now: datetime) -> datetime | None:
    """The latest time at one of `hours` (UTC, on the hour) at or before `now`."""
    if not hours:
        return None
    day = now.replace(minute=0, second=0, microsecond=0)
    for back in range(0, 2):  # today, then yesterday
        base = day - timedelta(days=back)
        slots = [base.replace(hour=h) for h in sorted(hours, reverse=True)]
        for slot in slots:
            if slot <= now:
                return slot
    return None


def schedule_due(hours: Sequence[int], now: datetime, handled: datetime | None) -> bool:
    """A slot has passed since the last one handled: due once, however many were missed
    while the server was down."""
    slot = last_slot(hours, now)
    return slot is not None and (handled is None or slot > handled)
