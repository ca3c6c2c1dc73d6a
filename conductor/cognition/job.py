"""What every cognition job shares: its spec, its inputs, its output, the entry lists of
its JSON answers and how flagged entries get resolved."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from conductor.cognition.job_state import Flag, JobState
from conductor.layers.conversation import turn_messages
from conductor.layers.sections import UNVERIFIED, Entry, all_entries, entry_id
from conductor.layers.state import ConversationState
from conductor.layers.turn_format import Turn
from conductor.layers.user_layers import UserLayers
from conductor.notes.secrets import has_secret

PROBLEMS = ("stale", "unsupported", "contradicted")


@dataclass(frozen=True)
class JobCaps:
    """Bounds on a job's answer: the grammar holds the model to them."""

    max_items: int = 6  # entries a section
    max_chars: int = 160  # characters an entry
    max_flags: int = 8
    reason_chars: int = 100


@dataclass
class JobInputs:
    """What a job reads, gathered once before its turn."""

    layers: UserLayers
    conversation: ConversationState
    state: JobState
    last_seq: int
    window: list[Turn]  # the replay window: in the prompt's prefix already
    working: dict[str, list[Entry]]
    semantic: dict[str, dict[str, list[Entry]]]  # file -> section -> entries


@dataclass
class JobOutput:
    """What a job's answer comes to: artifact texts and the state that moves on success."""

    files: dict[str, str] = field(default_factory=dict)  # artifact path -> new text
    resolutions: list[dict[str, str]] = field(default_factory=list)  # {id, action, by}
    checkpoint_seq: int | None = None  # the consolidation checkpoint
    review_seq: int | None = None
    extract_seq: int | None = None
    flags: list[Flag] | None = None  # the review's flags (replacing the open ones)
    resolved: set[str] = field(default_factory=set)  # flags closed by this run
    secrets_dropped: int = 0


@dataclass(frozen=True)
class JobSpec:
    name: str
    hours: tuple[int, ...]  # the schedule, UTC
    threshold: int  # turns after its checkpoint that make it due
    artifacts: tuple[str, ...]  # the only paths it may write, relative to the user's layers
    checkpoint: Callable[[ConversationState, JobState], int]  # the last turn taken in
    schema: Callable[[JobCaps], dict[str, Any]]
    instruction: Callable[[JobInputs, JobCaps], str]
    apply: Callable[[JobInputs, dict[str, Any], JobCaps], JobOutput]

    def dirty(self, last_seq: int, conversation: ConversationState, state: JobState) -> int:
        """Turns the job has not taken in yet."""
        return last_seq - self.checkpoint(conversation, state)


def entry_list_schema(caps: JobCaps) -> dict[str, Any]:
    return {"type": "array", "maxItems": caps.max_items, "items": {
        "type": "object",
        "properties": {"id": {"type": "string", "maxLength": 8},
                       "text": {"type": "string", "minLength": 1,
                                "maxLength": caps.max_chars}},
        "required": ["id", "text"], "additionalProperties": False}}


def sections_schema(sections: Sequence[str], caps: JobCaps) -> dict[str, Any]:
    return {"type": "object", "properties": {s: entry_list_schema(caps) for s in sections},
            "required": list(sections), "additionalProperties": False}


def entries_from_answer(answer: Any, sections: Sequence[str], old: dict[str, list[Entry]],
                        prefix: str, caps: JobCaps) -> tuple[dict[str, list[Entry]], int]:
    """The sections the model wrote, and how many items held a secret and were dropped
    (memory files are read back into prompts: no secret goes in). A known id keeps its
    entry's id, anything else is a new entry; text is made one line and cut to the cap,
    empty and repeated items go."""
    known = all_entries(old)
    secrets = 0
    used: set[str] = set()
    out: dict[str, list[Entry]] = {name: [] for name in sections}
    answer = answer if isinstance(answer, dict) else {}
    for name in sections:
        items = answer.get(name)
        for item in (items if isinstance(items, list) else [])[: caps.max_items]:
            if not isinstance(item, dict):
                continue
            text = " ".join(str(item.get("text", "")).split())[: caps.max_chars]
            if not text:
                continue
            if has_secret(text):
                secrets += 1
                continue
            given = item.get("id")
            entry_id_ = given if given in known and given not in used else entry_id(
                prefix, name, text)
            if entry_id_ in used:
                continue
            used.add(entry_id_)
            out[name].append(Entry(entry_id_, text))
    return out, secrets


def resolve_flags(old: dict[str, list[Entry]], new: dict[str, list[Entry]],
                  flags: Sequence[Flag], downgrade_to: str | None = None
                  ) -> tuple[dict[str, list[Entry]], list[dict[str, str]], set[str]]:
    """Every flagged entry of `old` must be removed, rewritten or downgraded in `new`. What
    the model did is read off the two versions; an entry it left as it was is downgraded
    by code (marked unverified, moved to `downgrade_to` when given).
    Returns (the entries, one resolution a flag, the flag ids resolved)."""
    before, after = all_entries(old), all_entries(new)
    out = {name: list(entries) for name, entries in new.items()}
    resolutions: list[dict[str, str]] = []
    for flag in flags:
        if flag.id not in before:
            continue
        old_section, old_entry = before[flag.id]
        if flag.id not in after:
            resolutions.append({"id": flag.id, "action": "removed", "by": "model"})
            continue
        section, entry = after[flag.id]
        if entry.text != old_entry.text:
            resolutions.append({"id": flag.id, "action": "rewritten", "by": "model"})
        elif section != old_section:
            resolutions.append({"id": flag.id, "action": "downgraded", "by": "model"})
        else:
            out[section] = [e for e in out[section] if e.id != flag.id]
            target = downgrade_to or section
            text = entry.text if entry.text.startswith(UNVERIFIED) else UNVERIFIED + entry.text
            out[target].append(Entry(entry.id, text))
            resolutions.append({"id": flag.id, "action": "downgraded", "by": "code"})
    return out, resolutions, {r["id"] for r in resolutions}


def entries_text(entries: dict[str, list[Entry]]) -> str:
    """Entries for an instruction: each section, each entry with its id."""
    lines = []
    for name, items in entries.items():
        lines.append(f"{name}:")
        lines += [f"  [{e.id}] {e.text}" for e in items] or ["  (none)"]
    return "\n".join(lines)


def flags_text(flags: Sequence[Flag]) -> str:
    return "\n".join(f"  [{f.id}] {f.problem}: {f.reason}" for f in flags) or "  (none)"


def turns_text(turns: Sequence[Turn], max_chars: int = 4000) -> str:
    """Turns that are not in the prompt's prefix, as plain lines, newest kept when cut."""
    lines = []
    for turn in turns:
        for message in turn_messages(turn):
            lines.append(f"{message['role']}: {' '.join(str(message['content']).split())}")
    text = "\n".join(lines)
    return text[-max_chars:]
