"""Semantic memory: facts.md, preferences.md, projects.md under fixed headings.

Never injected: the model reads them on demand (memory tools), the extraction job keeps
them. Created with their headings on first use.
"""

from __future__ import annotations

from collections.abc import Sequence

from conductor.layers.paths import LayerFiles
from conductor.layers.sections import Entry, parse_sections, render_sections
from conductor.storage.atomic import atomic_write, ensure_dir

# file -> (title, fixed sections, entry id prefix)
SEMANTIC_FILES: dict[str, tuple[str, tuple[str, ...], str]] = {
    "facts.md": ("Facts", ("About the user", "About the world"), "f"),
    "preferences.md": ("Preferences", ("Communication", "Tools and workflow"), "p"),
    "projects.md": ("Projects", ("Active", "Past"), "j"),
}


def semantic_template(name: str) -> str:
    title, sections, _prefix = SEMANTIC_FILES[name]
    return render_sections(title, sections, {})


def parse_semantic(name: str, text: str) -> dict[str, list[Entry]]:
    _title, sections, prefix = SEMANTIC_FILES[name]
    return parse_sections(text, sections, prefix)


def render_semantic(name: str, entries: dict[str, Sequence[Entry]]) -> str:
    title, sections, _prefix = SEMANTIC_FILES[name]
    return render_sections(title, sections, entries)


def read_semantic(files: LayerFiles, name: str) -> str:
    try:
        return (files.semantic_dir / name).read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return ""


def ensure_semantic(files: LayerFiles) -> None:
    ensure_dir(files.semantic_dir)
    for name in SEMANTIC_FILES:
        path = files.semantic_dir / name
        if not path.exists():
            atomic_write(path, semantic_template(name))
