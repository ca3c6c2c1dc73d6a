"""What a user's layers hold, for `tandem memory layers` and the layers route: each
layer's files with sizes and token counts, and the checkpoint. Reads only."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from conductor.layers.core import CORE_FILES
from conductor.layers.sections import UNVERIFIED
from conductor.layers.semantic import SEMANTIC_FILES, parse_semantic, read_semantic
from conductor.layers.user_layers import UserLayers
from conductor.layers.working import parse_working_memory, read_working_memory

LAYER_NAMES = ("core", "working", "semantic", "history")


@dataclass(frozen=True)
class LayerFile:
    layer: str
    name: str
    bytes: int
    tokens: int | None  # None where no tokenizer was given


def layer_file_path(layers: UserLayers, layer: str, name: str) -> Path | None:
    """The file a layer route or command may read, or None: names come from fixed lists,
    so no request can reach outside the layers."""
    files = layers.files
    if layer == "core" and name in CORE_FILES:
        return files.core_dir / name
    if layer == "working" and name == files.working_memory.name:
        return files.working_memory
    if layer == "semantic" and name in SEMANTIC_FILES:
        return files.semantic_dir / name
    return None  # history turns are read through the history store, by seq


def layer_files(layers: UserLayers, count: Callable[[str], int] | None = None) -> list[LayerFile]:
    files = layers.files
    listed = [("core", files.core_dir / n) for n in CORE_FILES]
    listed.append(("working", files.working_memory))
    listed += [("semantic", files.semantic_dir / n) for n in SEMANTIC_FILES]
    out = []
    for layer, path in listed:
        if not path.is_file():
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        out.append(LayerFile(layer, path.name, path.stat().st_size,
                             count(text) if count else None))
    return out


def summary(layers: UserLayers, count: Callable[[str], int] | None = None) -> dict:
    """The layers as JSON: files, history counts, checkpoint and replay window."""
    state = layers.state()
    seqs = layers.history.seqs()
    return {
        "user": layers.user,
        "files": [vars(f) for f in layer_files(layers, count)],
        "history": {"turns": len(seqs), "last_seq": seqs[-1] if seqs else 0,
                    "quarantined": layers.history.quarantined()},
        "checkpoint_seq": state.checkpoint_seq,
        "window_start": state.window_start,
    }


def layer_entries(layers: UserLayers, flagged: dict[str, str]) -> list[dict]:
    """Working and semantic memory's entries with their ids and flags: `unverified` (a
    review found no support), `pending_check` (a review flagged it: `flagged` maps the
    entry id to the problem; the next job resolves it)."""
    files = layers.files
    parsed = [("working", files.working_memory.name,
               parse_working_memory(read_working_memory(files)))]
    parsed += [("semantic", name, parse_semantic(name, read_semantic(files, name)))
               for name in SEMANTIC_FILES]
    return [{"layer": layer, "file": name, "section": section, "id": entry.id,
             "text": entry.text, "unverified": entry.text.startswith(UNVERIFIED),
             "pending_check": flagged.get(entry.id)}
            for layer, name, sections in parsed
            for section, entries in sections.items() for entry in entries]


def history_days(layers: UserLayers) -> list[dict]:
    """The continuous conversation's history by day (UTC): turns and their seq range."""
    days: dict[str, list[int]] = {}
    for seq, path in layers.history.paths().items():
        day = "-".join(path.parent.parts[-3:])
        days.setdefault(day, []).append(seq)
    return [{"day": day, "turns": len(seqs), "first_seq": min(seqs), "last_seq": max(seqs)}
            for day, seqs in sorted(days.items(), reverse=True)]
