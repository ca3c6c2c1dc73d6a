"""`working_memory.consolidate`: rewrites working memory from the turns since the
checkpoint and the review, resolves every flagged entry of it, and advances the
consolidation checkpoint (the conversation then replays from there). Writes
``WORKING_MEMORY.md`` and nothing else."""

from __future__ import annotations

from typing import Any

from conductor.cognition.job import (
    JobCaps,
    JobInputs,
    JobOutput,
    JobSpec,
    entries_from_answer,
    entries_text,
    flags_text,
    resolve_flags,
    sections_schema,
    turns_text,
)
from conductor.cognition.job_state import JobState
from conductor.layers.sections import all_entries
from conductor.layers.state import ConversationState
from conductor.layers.working import ID_PREFIX, SECTIONS, render_working_memory

NAME = "working_memory.consolidate"
ARTIFACT = "WORKING_MEMORY.md"
RECENT_TURNS = 16  # the turns it reads
# The checkpoint stops this many turns short of the last one: the next message still has
# the latest exchange verbatim ("yes, do that" needs it), not only its summary.
KEEP_VERBATIM = 2


def checkpoint(conversation: ConversationState, state: JobState) -> int:
    """The last turn this job has taken in."""
    return conversation.checkpoint_seq


def schema(caps: JobCaps) -> dict[str, Any]:
    return {"type": "object", "properties": {"sections": sections_schema(SECTIONS, caps)},
            "required": ["sections"], "additionalProperties": False}


def _flags(inputs: JobInputs):
    known = all_entries(inputs.working)
    return [f for f in inputs.state.flags if f.id in known]


def instruction(inputs: JobInputs, caps: JobCaps) -> str:
    first_in_prompt = inputs.window[0].seq if inputs.window else inputs.last_seq + 1
    unseen = [t for t in inputs.layers.history.turns_after(inputs.conversation.checkpoint_seq)
              if t.seq < first_in_prompt][-RECENT_TURNS:]
    earlier = f"Earlier turns not shown above:\n{turns_text(unseen)}\n\n" if unseen else ""
    return (
        "Background task, not from the user: rewrite working memory from the conversation "
        "above. Keep an entry that still holds with its id; rewrite one by keeping its id "
        'with new text; drop what is done or no longer true; add new entries with id "new". '
        f"At most {caps.max_items} entries a section, one short line each.\n"
        "Every flagged entry must be removed, rewritten, or moved to Pending Checks.\n\n"
        f"{earlier}Flagged:\n{flags_text(_flags(inputs))}\n\n"
        f"Working memory now:\n{entries_text(inputs.working)}\n\n"
        'Answer in JSON only: {"sections": {"Current Priorities": [{"id": "...", "text": '
        '"..."}], "Active Tasks": [], "Open Threads": [], "Recent Progress": [], '
        '"Pending Checks": []}}')


def apply(inputs: JobInputs, answer: dict[str, Any], caps: JobCaps) -> JobOutput:
    sections = answer.get("sections") if isinstance(answer, dict) else None
    new, secrets = entries_from_answer(sections, SECTIONS, inputs.working, ID_PREFIX, caps)
    new, resolutions, resolved = resolve_flags(inputs.working, new, _flags(inputs),
                                               downgrade_to="Pending Checks")
    moved_to = max(inputs.conversation.checkpoint_seq, inputs.last_seq - KEEP_VERBATIM)
    return JobOutput(files={ARTIFACT: render_working_memory(new)}, resolutions=resolutions,
                     resolved=resolved, checkpoint_seq=moved_to, secrets_dropped=secrets)


SPEC = JobSpec(name=NAME, hours=(4,), threshold=6, artifacts=(ARTIFACT,), checkpoint=checkpoint,
               schema=schema, instruction=instruction, apply=apply)
