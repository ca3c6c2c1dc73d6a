"""Core memory: AGENT.md (role, protocol), USER.md (the person), SOUL.md (voice,
principles). In every prompt; the operator's files.

Code creates them from short templates the first time a user's layers are used and never
writes them again: an edited file stays as the operator left it, a deleted one stays
deleted (it reads as empty).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from conductor.layers.paths import LayerFiles
from conductor.storage.atomic import atomic_write, ensure_dir

CORE_FILES = ("AGENT.md", "USER.md", "SOUL.md")

TEMPLATES = {
    "AGENT.md": (
        "# Agent\n\n"
        "You are the user's assistant in one continuous conversation that never starts "
        "over. Earlier turns, working memory and notes are yours to use; say so when you "
        "are unsure whether something is still true.\n"
    ),
    "USER.md": (
        "# User\n\n"
        "(Who the user is: name, role, what they work on. Written by the user; the "
        "assistant reads it.)\n"
    ),
    "SOUL.md": (
        "# Soul\n\n"
        "Be direct and brief. Prefer what you know to what you guess. Keep the user's "
        "secrets out of anything you write down.\n"
    ),
}


@dataclass(frozen=True)
class CoreFile:
    name: str
    text: str  # "" for a file the operator removed


def ensure_core(files: LayerFiles) -> bool:
    """Create the core folder from the templates on a user's first use; True when it did.
    An existing folder is never touched, whatever it holds."""
    if files.core_dir.exists():
        return False
    ensure_dir(files.core_dir)
    for name in CORE_FILES:
        atomic_write(files.core_dir / name, TEMPLATES[name])
    return True


def read_core(files: LayerFiles) -> list[CoreFile]:
    return [CoreFile(name, _read(files.core_dir / name)) for name in CORE_FILES]


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return ""
