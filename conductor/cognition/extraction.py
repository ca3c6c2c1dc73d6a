"""`semantic_memory.extract`: lasting facts, preferences and projects from the turns since
its own checkpoint into the three semantic files, resolving every flagged entry of them.
Writes ``semantic/facts.md``, ``preferences.md``, ``projects.md`` and nothing else."""

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
from conductor.layers.semantic import SEMANTIC_FILES, render_semantic
from conductor.layers.state import ConversationState

NAME = "semantic_memory.extract"
ARTIFACTS = tuple(f"semantic/{name}" for name in SEMANTIC_FILES)


def checkpoint(conversation: ConversationState, state: JobState) -> int:
    """The last turn this job has taken in."""
    return state.extract_seq


def schema(caps: JobCaps) -> dict[str, Any]:
    files = {name: sections_schema(sections, caps)
             for name, (_title, sections, _prefix) in SEMANTIC_FILES.items()}
    return {"type": "object",
            "properties": {"files": {"type": "object", "properties": files,
                                     "required": list(files), "additionalProperties": False}},
            "required": ["files"], "additionalProperties": False}


def _flags(inputs: JobInputs, name: str):
    known = all_entries(inputs.semantic[name])
    return [f for f in inputs.state.flags if f.id in known]


def instruction(inputs: JobInputs, caps: JobCaps) -> str:
    first_in_prompt = inputs.window[0].seq if inputs.window else inputs.last_seq + 1
    unseen = [t for t in inputs.layers.history.turns_after(inputs.state.extract_seq)
              if t.seq < first_in_prompt]
    earlier = f"Earlier turns not shown above:\n{turns_text(unseen)}\n\n" if unseen else ""
    files = "\n\n".join(f"{name}:\n{entries_text(sections)}"
                        for name, sections in inputs.semantic.items())
    flags = [f for name in inputs.semantic for f in _flags(inputs, name)]
    return (
        "Background task, not from the user: update semantic memory with what the "
        "conversation above says that will still hold in a month: facts, the user's "
        "preferences, projects. Keep an entry with its id; rewrite one by keeping its id "
        'with new text; add new entries with id "new"; drop what is no longer true. No '
        f"secrets. At most {caps.max_items} entries a section, one short line each.\n"
        "Every flagged entry must be removed or rewritten.\n\n"
        f"{earlier}Flagged:\n{flags_text(flags)}\n\nSemantic memory now:\n{files}\n\n"
        'Answer in JSON only: {"files": {"facts.md": {"About the user": [{"id": "...", '
        '"text": "..."}], "About the world": []}, "preferences.md": {"Communication": [], '
        '"Tools and workflow": []}, "projects.md": {"Active": [], "Past": []}}}')


def apply(inputs: JobInputs, answer: dict[str, Any], caps: JobCaps) -> JobOutput:
    files_answer = answer.get("files") if isinstance(answer, dict) else None
    files_answer = files_answer if isinstance(files_answer, dict) else {}
    output = JobOutput(extract_seq=inputs.last_seq)
    for name, (_title, sections, prefix) in SEMANTIC_FILES.items():
        old = inputs.semantic[name]
        new, secrets = entries_from_answer(files_answer.get(name), sections, old, prefix, caps)
        new, resolutions, resolved = resolve_flags(old, new, _flags(inputs, name))
        output.files[f"semantic/{name}"] = render_semantic(name, new)
        output.resolutions += resolutions
        output.resolved |= resolved
        output.secrets_dropped += secrets
    return output


SPEC = JobSpec(name=NAME, hours=(5,), threshold=12, artifacts=ARTIFACTS, checkpoint=checkpoint,
               schema=schema, instruction=instruction, apply=apply)
