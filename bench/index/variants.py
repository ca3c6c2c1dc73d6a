"""The index bench's variants: how much of a lived-in store (the quality bench's 40 notes
and their revisions) the hidden context shows, and in which format. Each is a profile's
`memory.notes_shown` (conductor/hidden/tail_notes.NotesShown), served as a user would
serve it: in a profile file."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

from engine.profiles import Profile, load_profile_file

Pairs = tuple[tuple[str, int | str], ...]


@dataclass(frozen=True)
class Variant:
    name: str
    notes_shown: Pairs  # every key of memory.notes_shown
    about: str


# What the hidden context showed before this bench (the yardstick of its accuracy bar);
# each variant states every key, so the code's defaults can move without moving them.
BEFORE: dict[str, int | str] = {"index_budget": 1500, "match_budget": 600, "max_matches": 3,
                                "note_format": "header", "match_frame": "full",
                                "match_place": "after"}


def _shown(**changes: int | str) -> Pairs:
    return tuple({**BEFORE, **changes}.items())


DEFAULT = "index1500-header"
CHOSEN = "index0-plain-1match"  # the code's defaults until issue 58 placed matches first
LEADING = "index0-plain-1match-before"  # the code's defaults since (tail_notes.NotesShown)
VARIANTS: tuple[Variant, ...] = (
    Variant(DEFAULT, _shown(), "the default before this bench: an index of up to 1,500 "
            "tokens, three matches under a `[id] title (kind, status)` header"),
    Variant("index500-header", _shown(index_budget=500), "a third of the index"),
    Variant("index0-header", _shown(index_budget=0), "no index: matches only"),
    Variant("index1500-plain", _shown(note_format="plain"),
            "the whole index, matches as `title: body`"),
    Variant("index0-plain", _shown(index_budget=0, note_format="plain"),
            "no index, plain matches"),
    Variant(CHOSEN, _shown(index_budget=0, note_format="plain", max_matches=1),
            "no index, one plain match"),
    Variant("index300-plain-1match", _shown(index_budget=300, note_format="plain",
                                            max_matches=1),
            "a short index (pinned rules and ratified notes first), one plain match"),
    Variant("index1500-plain-1match", _shown(note_format="plain", max_matches=1),
            "the whole index, one plain match"),
    Variant("index0-plain-1match-short", _shown(index_budget=0, note_format="plain",
                                                max_matches=1, match_frame="short"),
            "no index, one plain match under a preamble of a third the tokens"),
    Variant(LEADING, _shown(index_budget=0, note_format="plain", max_matches=1,
                            match_place="before"),
            "no index, one plain match placed before the message, where the prewarm of "
            "likely notes has it cached"),
)
QUICK_VARIANTS = tuple(v for v in VARIANTS if v.name in (DEFAULT, CHOSEN, LEADING))


def variant_named(name: str) -> Variant:
    for variant in VARIANTS:
        if variant.name == name:
            return variant
    raise ValueError(f"no index variant {name!r} (known: {', '.join(v.name for v in VARIANTS)})")


def profile_file(profile: Profile, notes_shown: Pairs, folder: Path) -> Path:
    """`profile`'s YAML with `memory.notes_shown` set, written as `<folder>/<name>.yaml`
    (the same name, so the server answers to the same model name); loaded back once so a
    bad variant fails here, not in a server's start."""
    raw = yaml.safe_load(profile.path.read_text()) or {}
    memory = dict(raw.get("memory") or {})
    memory["notes_shown"] = dict(notes_shown)
    raw["memory"] = memory
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{profile.name}.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    load_profile_file(path)
    return path
