"""Working memory: WORKING_MEMORY.md, fixed sections, in every prompt.

The consolidation job keeps it (and is the only code that writes it after the template);
the operator may edit it by hand. The prompt takes the file as it is, so a hand edit
shows on the next message.
"""

from __future__ import annotations

from collections.abc import Sequence

from conductor.layers.paths import LayerFiles
from conductor.layers.sections import Entry, parse_sections, render_sections
from conductor.storage.atomic import atomic_write

SECTIONS = ("Current Priorities", "Active Tasks", "Open Threads", "Recent Progress",
            "Pending Checks")
TITLE = "Working memory"
ID_PREFIX = "w"


def render_working_memory(sections: dict[str, Sequence[Entry]]) -> str:
    """The file from its sections' entries; every fixed section appears, in order."""
    return render_sections(TITLE, SECTIONS, sections)


def parse_working_memory(text: str) -> dict[str, list[Entry]]:
    """The entries under each fixed section; other headings and lines are ignored."""
    return parse_sections(text, SECTIONS, ID_PREFIX)


def ensure_working_memory(files: LayerFiles) -> None:
    if not files.working_memory.exists():
        atomic_write(files.working_memory, render_working_memory({}))


def read_working_memory(files: LayerFiles) -> str:
    try:
        return files.working_memory.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return ""
