"""`verification_review`: flags entries of working and semantic memory that are stale,
unsupported or contradicted, each by its id, for the next consolidation and extraction
to resolve. Writes the review (``state/REVIEW.md``) and nothing else."""

from __future__ import annotations

from typing import Any

from conductor.cognition.job import (
    PROBLEMS,
    JobCaps,
    JobInputs,
    JobOutput,
    JobSpec,
    entries_text,
)
from conductor.cognition.job_state import Flag, JobState
from conductor.layers.sections import all_entries
from conductor.layers.state import ConversationState
from conductor.notes.secrets import has_secret

NAME = "verification_review"
ARTIFACT = "state/REVIEW.md"


def checkpoint(conversation: ConversationState, state: JobState) -> int:
    """The last turn this job has taken in."""
    return state.review_seq


def schema(caps: JobCaps) -> dict[str, Any]:
    flag = {"type": "object",
            "properties": {"id": {"type": "string", "maxLength": 8},
                           "problem": {"enum": list(PROBLEMS)},
                           "reason": {"type": "string", "maxLength": caps.reason_chars}},
            "required": ["id", "problem", "reason"], "additionalProperties": False}
    return {"type": "object",
            "properties": {"flags": {"type": "array", "maxItems": caps.max_flags, "items": flag}},
            "required": ["flags"], "additionalProperties": False}


def _reviewed(inputs: JobInputs) -> dict[str, Any]:
    return {"working memory": inputs.working,
            **{name: sections for name, sections in inputs.semantic.items()}}


def instruction(inputs: JobInputs, caps: JobCaps) -> str:
    blocks = "\n".join(f"{name}:\n{entries_text(entries)}"
                       for name, entries in _reviewed(inputs).items())
    return (
        "Background task, not from the user: review the memory entries below against the "
        "conversation above and core memory. Flag each entry that is stale (no longer "
        "true), unsupported (nothing backs it) or contradicted (the conversation says "
        "otherwise), by its id, with a short reason. Flag nothing that holds.\n\n"
        f"{blocks}\n\n"
        'Answer in JSON only: {"flags": [{"id": "...", "problem": "stale|unsupported|'
        'contradicted", "reason": "..."}]}')


def apply(inputs: JobInputs, answer: dict[str, Any], caps: JobCaps) -> JobOutput:
    known: set[str] = set(all_entries(inputs.working))
    for sections in inputs.semantic.values():
        known |= set(all_entries(sections))
    new: dict[str, Flag] = {}
    raw = answer.get("flags") if isinstance(answer, dict) else None
    for item in (raw if isinstance(raw, list) else [])[: caps.max_flags]:
        if not isinstance(item, dict) or item.get("id") not in known:
            continue  # a flag must name an entry that exists
        problem = item.get("problem") if item.get("problem") in PROBLEMS else "unsupported"
        reason = " ".join(str(item.get("reason", "")).split())[: caps.reason_chars]
        new[item["id"]] = Flag(item["id"], problem, "" if has_secret(reason) else reason)
    # Flags still open from an earlier review stay until a job resolves them.
    merged = {f.id: f for f in inputs.state.flags if f.id in known}
    merged.update(new)
    flags = list(merged.values())
    return JobOutput(files={ARTIFACT: render_review(inputs.last_seq, flags)},
                     review_seq=inputs.last_seq, flags=flags)


def render_review(through_seq: int, flags: list[Flag]) -> str:
    lines = ["# Verification review", "", f"Reviewed through turn #{through_seq}.", ""]
    lines += [f"- [{f.id}] {f.problem}: {f.reason}" for f in flags] or ["No entry flagged."]
    return "\n".join(lines) + "\n"


SPEC = JobSpec(name=NAME, hours=(3, 15), threshold=8, artifacts=(ARTIFACT,), checkpoint=checkpoint,
               schema=schema, instruction=instruction, apply=apply)
