"""Working memory: WORKING_MEMORY.md, fixed sections, in every prompt.

The consolidation job keeps it (and is the only code that writes it after the template);
the operator may edit it by hand. The prompt takes the file as it is, so a hand edit
shows on the next message.
"""

from __future__ import annotations

import re

from conductor.atomic import atomic_write
from conductor.layers.paths import LayerFiles

SECTIONS = ("Current Priorities", "Active Tasks", "Open Threads", "Recent Progress",
            "Pending Checks")
TITLE = "# Working memory"


def render_working_memory(sections: dict[str, list[str]]) -> str:
    """The file from its sections' bullet lines; every fixed section appears, in order."""
    out = [TITLE, ""]
    for name in SECTIONS:
        out.append(f"## {name}")
        out.extend(f"- {line}" for line in sections.get(name, ()))
        out.append("")
    return "\n".join(out)


def parse_working_memory(text: str) -> dict[str, list[str]]:
    """The bullet lines under each fixed section; other headings and lines are ignored."""
    sections: dict[str, list[str]] = {name: [] for name in SECTIONS}
    current: str | None = None
    for line in text.splitlines():
        heading = re.match(r"##\s+(.+?)\s*$", line)
        if heading:
            current = next((s for s in SECTIONS if s.lower() == heading.group(1).lower()), None)
        elif current is not None and line.lstrip().startswith("- "):
            sections[current].append(line.lstrip()[2:].strip())
    return sections


def ensure_working_memory(files: LayerFiles) -> None:
    if not files.working_memory.exists():
        atomic_write(files.working_memory, render_working_memory({}))


def read_working_memory(files: LayerFiles) -> str:
    try:
        return files.working_memory.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return ""


def write_working_memory(files: LayerFiles, sections: dict[str, list[str]]) -> None:
    atomic_write(files.working_memory, render_working_memory(sections))
