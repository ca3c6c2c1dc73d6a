"""What a start does after a crash: temp files of dead writers removed, torn journal
lines counted.

Nothing else needs repair: every file is replaced whole (conductor.storage.atomic), a note moved
under a new name and left twice is settled by the store on load (the longer changelog
wins), a search sync that died is rebuilt by the next sync (its ``sync.pending`` mark),
and a torn journal line is ended by the next append and skipped by every reader.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from conductor.storage.atomic import clean_temp_files
from conductor.storage.journal import Journal

log = logging.getLogger("tandem.memory")


@dataclass(frozen=True)
class Recovery:
    temp_files_removed: int
    journal_torn_lines: int


def recover(memory_root: Path) -> Recovery:
    """Clean up after whatever ended the last process; counts only, never file names
    (they hold note titles)."""
    if not memory_root.is_dir():
        return Recovery(0, 0)
    removed = clean_temp_files(memory_root)
    torn = Journal(memory_root / "journal.jsonl").read().torn
    if removed or torn:
        log.warning("memory: %d temp files of an ended writer removed; %d torn journal "
                    "lines skipped", removed, torn)
    return Recovery(removed, torn)
