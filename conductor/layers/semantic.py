"""Semantic memory: facts.md, preferences.md, projects.md under fixed headings.

Never injected: the model reads them on demand (memory tools), the extraction job keeps
them. Created with their headings on first use.
"""

from __future__ import annotations

from conductor.atomic import atomic_write, ensure_dir
from conductor.layers.paths import LayerFiles

SEMANTIC_FILES: dict[str, tuple[str, tuple[str, ...]]] = {
    "facts.md": ("Facts", ("About the user", "About the world")),
    "preferences.md": ("Preferences", ("Communication", "Tools and workflow")),
    "projects.md": ("Projects", ("Active", "Past")),
}


def semantic_template(name: str) -> str:
    title, headings = SEMANTIC_FILES[name]
    return "\n".join([f"# {title}", "", *(f"## {h}\n" for h in headings)])


def ensure_semantic(files: LayerFiles) -> None:
    ensure_dir(files.semantic_dir)
    for name in SEMANTIC_FILES:
        path = files.semantic_dir / name
        if not path.exists():
            atomic_write(path, semantic_template(name))
