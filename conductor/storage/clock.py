"""Time as every memory file writes it: UTC, ISO 8601 with microseconds and a ``Z``.

Here, below the notes, because the journal (``journal.py``) stamps its entries with it as
notes, usage and the ledger do; ``conductor.notes.note_format`` uses the same helpers.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, time
from typing import Any


def utc_now() -> datetime:
    return datetime.now(UTC)


def format_time(moment: datetime) -> str:
    """``2025-01-01T12:00:00.123456Z`` (UTC)."""
    return moment.astimezone(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def parse_time(value: Any) -> datetime:
    """A UTC datetime from a frontmatter value (ISO string, datetime or date)."""
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    if isinstance(value, date):
        return datetime.combine(value, time(), UTC)
    text = str(value).strip()
    parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
