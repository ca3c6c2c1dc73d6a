"""What code makes of a job's JSON answer: entries keep their ids, flagged entries are
resolved, secrets stay out, and a job writes its own artifacts only, keeping versions."""

from __future__ import annotations

import asyncio
import json

import pytest

from conductor.cognition import consolidation, extraction, verification
from conductor.cognition.artifacts import ArtifactRefused, version_dir, write_artifacts
from conductor.cognition.backend import JobAnswer
from conductor.cognition.job import JobCaps
from conductor.cognition.job_state import Flag, JobState
from conductor.cognition.runner import gather, run_job
from conductor.layers.conversation import WindowBounds
from conductor.layers.sections import Entry
from conductor.layers.user_layers import UserLayers
from conductor.layers.working import parse_working_memory, render_working_memory

CAPS = JobCaps()
TASK = Entry("w-00000a", "ship the layers")
THREAD = Entry("w-00000b", "ask about the deploy")
FACT = Entry("f-00000c", "the user lives in Lyon")


@pytest.fixture
def layers(tmp_path) -> UserLayers:
    found = UserLayers(tmp_path, "ada")
    found.ensure()
    (found.files.working_memory).write_text(render_working_memory(
        {"Active Tasks": [TASK], "Open Threads": [THREAD]}))
    (found.files.semantic_dir / "facts.md").write_text(
        f"# Facts\n\n## About the user\n- [{FACT.id}] {FACT.text}\n\n## About the world\n")
    return found


def inputs_with(layers: UserLayers, flags: list[Flag]):
    found = gather(layers, WindowBounds(40, 2000), len)
    found.state = JobState(flags=flags)
    return found


def sections(**named: list[dict]) -> dict:
    return {"sections": {name: named.get(name.replace(" ", "_").lower(), []) for name in (
        "Current Priorities", "Active Tasks", "Open Threads", "Recent Progress",
        "Pending Checks")}}


def test_consolidation_keeps_known_ids_and_gives_new_entries_their_own(layers):
    answer = sections(active_tasks=[{"id": TASK.id, "text": "ship the layers today"},
                                    {"id": "new", "text": "write the jobs"},
                                    {"id": "new", "text": "write the jobs"}])
    out = consolidation.apply(inputs_with(layers, []), answer, CAPS)
    written = parse_working_memory(out.files["WORKING_MEMORY.md"])["Active Tasks"]
    assert written[0] == Entry(TASK.id, "ship the layers today")
    assert [e.text for e in written] == ["ship the layers today", "write the jobs"]
    assert written[1].id.startswith("w-") and written[1].id != TASK.id


def test_every_flagged_entry_is_resolved_by_the_model_or_else_by_code(layers):
    flags = [Flag(TASK.id, "stale", "done"), Flag(THREAD.id, "unsupported", "never said")]
    kept = sections(active_tasks=[], open_threads=[{"id": THREAD.id, "text": THREAD.text}])
    out = consolidation.apply(inputs_with(layers, flags), kept, CAPS)
    assert out.resolutions == [{"id": TASK.id, "action": "removed", "by": "model"},
                               {"id": THREAD.id, "action": "downgraded", "by": "code"}]
    assert out.resolved == {TASK.id, THREAD.id}
    written = parse_working_memory(out.files["WORKING_MEMORY.md"])
    assert written["Open Threads"] == []
    assert written["Pending Checks"] == [Entry(THREAD.id, "unverified: " + THREAD.text)]
    moved = sections(pending_checks=[{"id": TASK.id, "text": TASK.text}],
                     open_threads=[{"id": THREAD.id, "text": "ask Sam about the deploy"}])
    out = consolidation.apply(inputs_with(layers, flags), moved, CAPS)
    assert [r["action"] for r in out.resolutions] == ["downgraded", "rewritten"]
    assert {r["by"] for r in out.resolutions} == {"model"}


def test_consolidation_moves_the_checkpoint_short_of_the_last_turns(layers):
    found = inputs_with(layers, [])
    found.last_seq = 9
    out = consolidation.apply(found, sections(), CAPS)
    assert out.checkpoint_seq == 9 - consolidation.KEEP_VERBATIM


def test_an_entry_holding_a_secret_never_reaches_a_memory_file(layers):
    answer = {"files": {
        "facts.md": {"About the user": [{"id": "new", "text": "their key is "
                                         "sk-proj-Abcdefghijklmnopqrstuvwxyz012345"},
                                        {"id": FACT.id, "text": FACT.text}],
                     "About the world": []},
        "preferences.md": {"Communication": [], "Tools and workflow": []},
        "projects.md": {"Active": [], "Past": []}}}
    out = extraction.apply(inputs_with(layers, []), answer, CAPS)
    assert out.secrets_dropped == 1
    assert "sk-proj" not in out.files["semantic/facts.md"]
    assert FACT.text in out.files["semantic/facts.md"]


def test_the_review_flags_only_entries_that_exist_and_keeps_open_flags(layers):
    open_flag = Flag(FACT.id, "stale", "moved away")
    answer = {"flags": [{"id": TASK.id, "problem": "contradicted", "reason": "user said no"},
                        {"id": "w-ffffff", "problem": "stale", "reason": "no such entry"}]}
    out = verification.apply(inputs_with(layers, [open_flag]), answer, CAPS)
    assert {f.id for f in out.flags} == {TASK.id, FACT.id}
    assert f"[{TASK.id}] contradicted: user said no" in out.files["state/REVIEW.md"]


def test_a_job_may_write_its_own_artifacts_only(layers):
    files = layers.files
    before = (files.core_dir / "AGENT.md").read_text()
    for path in ("core/AGENT.md", "semantic/facts.md", "../keys.json", "/etc/passwd"):
        with pytest.raises(ArtifactRefused):
            write_artifacts(files, consolidation.SPEC.artifacts,
                            {"WORKING_MEMORY.md": "# ok\n", path: "x"})
    assert (files.core_dir / "AGENT.md").read_text() == before
    assert "ship the layers" in files.working_memory.read_text()  # nothing written at all
    with pytest.raises(ArtifactRefused):
        write_artifacts(files, ("core/AGENT.md",), {"core/AGENT.md": "x"})


def test_each_artifact_keeps_its_earlier_texts(layers):
    files = layers.files
    first = files.working_memory.read_text()
    assert write_artifacts(files, ("WORKING_MEMORY.md",), {"WORKING_MEMORY.md": "# two\n"}) == [
        "WORKING_MEMORY.md"]
    assert write_artifacts(files, ("WORKING_MEMORY.md",), {"WORKING_MEMORY.md": "# two\n"}) == []
    write_artifacts(files, ("WORKING_MEMORY.md",), {"WORKING_MEMORY.md": "# three\n"})
    kept = version_dir(files, "WORKING_MEMORY.md")
    assert (kept / "1.md").read_text() == first and (kept / "2.md").read_text() == "# two\n"


class _AnswerOnce:
    """A backend that answers with a fixed text (the runner's own logic is under test)."""

    provider, model = "engine", "fixed"

    def __init__(self, text: str) -> None:
        self.text = text

    async def answer(self, prompt, schema, max_tokens, script=None) -> JobAnswer:
        return JobAnswer(self.text, "stop", output_tokens=40)


def test_bytes_the_grammar_counted_as_one_character_stay_within_the_length_it_allowed(layers):
    # Seen on random weights under the grammar: a string the grammar ended at 48 characters
    # held a 3-byte sequence that is not UTF-8, which decodes to three U+FFFD: 50 characters.
    text = "a" * 46 + "\ufffd" * 3 + "b"
    answer = json.dumps(sections(active_tasks=[{"id": "new", "text": text}]),
                        ensure_ascii=False)
    caps = JobCaps(max_items=2, max_chars=48, max_flags=2, reason_chars=32)
    record = asyncio.run(run_job(consolidation.SPEC, layers, _AnswerOnce(answer), "manual",
                                 WindowBounds(40, 2000), len, caps, 256))
    assert record.outcome == "changed", record.reason
    written = parse_working_memory(layers.working_memory())["Active Tasks"]
    assert [e.text for e in written] == ["a" * 46 + "\ufffdb"]
