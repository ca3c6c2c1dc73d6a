"""A job's writes: only its own artifacts, never core memory, each earlier text kept.

Every path is checked before anything is written, so a refused run writes nothing. The
text a write replaces is kept under ``state/versions/<artifact>/<n>.md`` (as notes keep
their revisions), so a bad run can be rolled back by hand.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path, PurePosixPath

from conductor.layers.paths import LayerFiles
from conductor.storage.atomic import atomic_write


class ArtifactRefused(Exception):
    """A job tried to write outside its artifacts; the message names the path only."""


def check_paths(allowed: Iterable[str], paths: Iterable[str]) -> None:
    allowed = set(allowed)
    for rel in paths:
        pure = PurePosixPath(rel)
        if rel not in allowed or pure.is_absolute() or ".." in pure.parts or (
                pure.parts and pure.parts[0] == "core"):
            raise ArtifactRefused(f"not this job's artifact: {rel}")


def version_dir(files: LayerFiles, rel: str) -> Path:
    return files.state_dir / "versions" / str(PurePosixPath(rel).with_suffix(""))


def write_artifacts(files: LayerFiles, allowed: Iterable[str],
                    changes: Mapping[str, str]) -> list[str]:
    """Write the changed artifacts; returns the paths whose text changed."""
    check_paths(allowed, changes)
    changed = []
    for rel, text in changes.items():
        path = files.user_dir / rel
        old = path.read_text(encoding="utf-8") if path.is_file() else None
        if old == text:
            continue
        if old is not None:
            keep = version_dir(files, rel)
            number = 1 + max((int(p.stem) for p in keep.glob("*.md") if p.stem.isdigit()),
                             default=0)
            atomic_write(keep / f"{number}.md", old, kind="artifact")
        atomic_write(path, text, kind="artifact")
        changed.append(rel)
    return changed
