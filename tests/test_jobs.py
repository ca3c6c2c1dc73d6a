"""The cognition jobs on the real engine: scripted JSON for exact behaviour, unscripted on
the tiny model's random weights where the grammar alone must give a valid artifact, the
prompt on the conversation's cached prefix, preemption by a client and the retry."""

from __future__ import annotations

import asyncio
import json
import os
import stat
import time
from pathlib import Path

import httpx
import pytest

from conductor.cognition import consolidation
from conductor.cognition.job import JobOutput, JobSpec
from conductor.cognition.jobs import JOBS
from conductor.cognition.runner import run_job
from conductor.layers.semantic import SEMANTIC_FILES, parse_semantic
from conductor.layers.working import SECTIONS, parse_working_memory
from engine.engine import GenerationParams
from server.idle.job_backends import EngineJobBackend
from server.turn.continuous import conversation_prefix_ids, window_bounds
from tests.inprocess import InProcessApp, eventually

VERIFY, CONSOLIDATE, EXTRACT = JOBS


def compact(data: dict) -> str:
    """A scripted answer as the grammar writes JSON: no spaces between tokens."""
    return json.dumps(data, separators=(",", ":"), ensure_ascii=False)


def wm_answer(**named: list[dict]) -> str:
    return compact({"sections": {s: named.get(s.replace(" ", "_").lower(), [])
                                 for s in SECTIONS}})


@pytest.fixture
def app(served, tmp_path) -> InProcessApp:
    found = InProcessApp(served, tmp_path)
    for i in range(7):
        found.converse(f"turn {i}: we are moving the deploy to Friday", f"noted {i}")
    eventually(lambda: found.memory.layers("tester").history.last_seq == 7)
    return found


def run(app: InProcessApp, job: str, script: str | None = None, **extra) -> dict:
    response = app.request("POST", f"/v1/conductor/jobs/{job}/run",
                           json={"script": script, **extra} if script else extra)
    assert response.status_code == 200, response.text
    return response.json()


def layers_dir(app: InProcessApp):
    return app.memory.layers("tester").files.user_dir


def test_a_consolidation_rewrites_working_memory_and_moves_the_checkpoint(app, tokenizer):
    record = run(app, CONSOLIDATE, wm_answer(active_tasks=[
        {"id": "new", "text": "move the deploy to Friday"}]))
    assert record["outcome"] == "changed" and record["files_changed"] == ["WORKING_MEMORY.md"]
    assert (record["checkpoint_before"], record["checkpoint_after"]) == (0, 5)
    assert record["turns"] == [1, 7]
    wm = parse_working_memory((layers_dir(app) / "WORKING_MEMORY.md").read_text())
    assert [e.text for e in wm["Active Tasks"]] == ["move the deploy to Friday"]
    # The job's prompt began with the conversation's exact ids: served from the cache.
    last = app.memory.latest_record("tester", "continuous")
    assert record["cached_tokens"] >= len(last.ids) - 32
    # The conversation now replays from after the checkpoint, with the new working memory.
    app.converse("what is next?", "Friday's deploy")
    text = tokenizer.decode(app.memory.latest_record("tester", "continuous").ids)
    assert "turn 4:" not in text and "turn 5:" in text and "turn 6:" in text
    assert "move the deploy to Friday" in text
    runs = app.request("GET", "/v1/conductor/jobs/runs", params={"limit": 5}).json()["data"]
    assert runs[0]["run_id"] == record["run_id"]
    assert "deploy" not in json.dumps(runs)  # records hold ids and counts, never text


def test_after_a_consolidation_the_new_prefix_is_prefilled_and_the_next_message_finds_it(
        app, served, tiny_profile):
    run(app, CONSOLIDATE, wm_answer(open_threads=[{"id": "new", "text": "the Friday deploy"}]))
    jobs = app.app.state.tandem.jobs
    assert jobs.prewarm_due == {"tester"}
    assert served.run(jobs.tick()) == []  # the idle loop's turn: the prefill, not a job
    assert jobs.prewarm_due == set()
    warmed = conversation_prefix_ids(jobs.engine, jobs.profile, app.memory, "tester")
    _, usage, _ = app.converse("and now?", "Friday")
    assert usage["prompt_tokens_details"]["cached_tokens"] >= len(warmed) - tiny_profile.block_size


def test_a_job_on_a_long_conversation_leaves_out_its_oldest_turns_not_its_answer(
        app, tiny_profile):
    record = app.memory.latest_record("tester", "continuous")
    jobs = app.app.state.tandem.jobs
    jobs.max_tokens = tiny_profile.max_model_len - len(record.ids) + 64  # the record won't do
    done = run(app, CONSOLIDATE, wm_answer(active_tasks=[{"id": "new", "text": "Friday"}]))
    assert done["outcome"] == "changed"
    assert done["prompt_tokens"] + jobs.max_tokens <= tiny_profile.max_model_len


def test_a_failed_run_changes_no_file_and_no_checkpoint_and_says_why(app):
    before = (layers_dir(app) / "WORKING_MEMORY.md").read_text()
    app.app.state.tandem.jobs.max_tokens = 8  # the JSON cannot close in 8 tokens
    record = run(app, CONSOLIDATE, wm_answer(active_tasks=[{"id": "new", "text": "x" * 80}]))
    assert record["outcome"] == "failed" and record["reason"] == "answer_cut_at_max_tokens"
    assert record["checkpoint_after"] == record["checkpoint_before"] == 0
    assert (layers_dir(app) / "WORKING_MEMORY.md").read_text() == before
    listed = app.request("GET", "/v1/conductor/jobs").json()["data"]
    consolidate = next(j for j in listed if j["job"] == CONSOLIDATE)
    assert consolidate["dirty"] == 7 and consolidate["last_run"]["outcome"] == "failed"


def test_the_review_flags_and_the_next_jobs_resolve_every_flag(app):
    run(app, CONSOLIDATE, wm_answer(active_tasks=[{"id": "new", "text": "deploy on Monday"}],
                                    open_threads=[{"id": "new", "text": "ask Sam"}]))
    wm = parse_working_memory((layers_dir(app) / "WORKING_MEMORY.md").read_text())
    monday, sam = wm["Active Tasks"][0].id, wm["Open Threads"][0].id
    review = run(app, VERIFY, compact({"flags": [
        {"id": monday, "problem": "contradicted", "reason": "the user said Friday"},
        {"id": sam, "problem": "unsupported", "reason": "never said"}]}))
    assert review["outcome"] == "changed" and review["flags_raised"] == 2
    assert monday in (layers_dir(app) / "state/REVIEW.md").read_text()
    # The model rewrites one and leaves the other: code downgrades what it left.
    fixed = run(app, CONSOLIDATE, wm_answer(
        active_tasks=[{"id": monday, "text": "deploy on Friday"}],
        open_threads=[{"id": sam, "text": "ask Sam"}]))
    assert fixed["flags_resolved"] == [{"id": monday, "action": "rewritten", "by": "model"},
                                       {"id": sam, "action": "downgraded", "by": "code"}]
    wm = parse_working_memory((layers_dir(app) / "WORKING_MEMORY.md").read_text())
    assert [e.text for e in wm["Pending Checks"]] == ["unverified: ask Sam"]
    jobs = app.request("GET", "/v1/conductor/jobs").json()
    assert jobs["data"][0]["last_run"]["outcome"] == "changed"
    state = json.loads((layers_dir(app) / "state/jobs.json").read_text())
    assert state["flags"] == []  # every flag resolved


@pytest.mark.parametrize("job", list(JOBS))
def test_an_unscripted_job_on_random_weights_still_leaves_a_valid_artifact(app, job):
    app.app.state.tandem.jobs.caps = consolidation.JobCaps(max_items=2, max_chars=48,
                                                         max_flags=2, reason_chars=32)
    record = run(app, job)
    assert record["outcome"] in ("changed", "unchanged"), record
    root = layers_dir(app)
    wm = (root / "WORKING_MEMORY.md").read_text()
    assert [line[3:] for line in wm.splitlines() if line.startswith("## ")] == list(SECTIONS)
    for name in SEMANTIC_FILES:
        text = (root / "semantic" / name).read_text()
        assert all(len(e.text) <= 48 for s in parse_semantic(name, text).values() for e in s)


def test_a_job_writing_outside_its_artifacts_is_refused(app, served):
    core = layers_dir(app) / "core/AGENT.md"
    before = core.read_text()
    rogue = JobSpec(name="rogue", hours=(), threshold=1, artifacts=("WORKING_MEMORY.md",),
                    checkpoint=lambda conversation, state: 0, schema=consolidation.schema,
                    instruction=consolidation.instruction,
                    apply=lambda inputs, answer, caps: JobOutput(files={
                        "WORKING_MEMORY.md": "# fine\n", "core/AGENT.md": "# taken over\n"}))
    jobs = app.app.state.tandem.jobs
    record = served.run(run_job(rogue, app.memory.layers("tester"),
                                EngineJobBackend(jobs.engine, app.memory.latest_record), "manual",
                                window_bounds(jobs.profile), jobs.engine.count_tokens, jobs.caps,
                                64, script=wm_answer()))
    assert record.outcome == "refused" and "core/AGENT.md" in record.reason
    assert core.read_text() == before
    assert "# fine" not in (layers_dir(app) / "WORKING_MEMORY.md").read_text()


def test_a_client_request_preempts_a_job_and_the_job_is_retried(app, served):
    jobs = app.app.state.tandem.jobs
    long_answer = wm_answer(**{name.replace(" ", "_").lower(): [
        {"id": "new", "text": f"{name} item {i} " + "words " * 20} for i in range(6)]
        for name in SECTIONS})

    async def scenario():
        decoded = jobs.live_tokens
        task = asyncio.create_task(jobs.run("tester", CONSOLIDATE, "state", long_answer))
        # Decoding, not only submitted: a job waiting on its grammar's first compile is still
        # in the scheduler's waiting queue, where a client request passes it by rule.
        while jobs.live_tokens < decoded + 5:
            await asyncio.sleep(0.005)
        transport = httpx.ASGITransport(app=app.app, client=("127.0.0.1", 5000))
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
            answer = await client.post("/v1/chat/completions", json={
                "model": "tiny", "messages": [{"role": "user", "content": "quick"}],
                "script": "Quick answer."})
        return await task, answer.json()

    record, answer = served.run(scenario())
    assert record.outcome == "preempted" and record.reason == "client_request"
    assert answer["choices"][0]["message"]["content"] == "Quick answer."
    metrics = app.request("GET", "/metrics").text
    assert f'tandem_background_preemptions_total{{run="{CONSOLIDATE}"}} 1.0' in metrics
    assert record.checkpoint_after == 0
    jobs.mode = "on"  # the idle loop's turn: the job is still due, and runs again
    # Unscripted on random weights: the small caps keep its answer inside max_tokens and
    # its schema, as in the unscripted-job test below.
    jobs.caps = consolidation.JobCaps(max_items=2, max_chars=48, max_flags=2, reason_chars=32)
    due = jobs.controller.next_due()
    assert (due.spec.name, due.trigger) == (CONSOLIDATE, "state")
    retried = served.run(jobs.tick())
    assert [r.job for r in retried] == [CONSOLIDATE]
    assert retried[0].outcome in ("changed", "unchanged")


def preempt_a_consolidation(app: InProcessApp, served, client_script: str):
    """A consolidation decoding its (long, scripted) answer, then a client request:
    (the job's record, the client's answer)."""
    jobs = app.app.state.tandem.jobs
    long_answer = wm_answer(**{name.replace(" ", "_").lower(): [
        {"id": "new", "text": f"{name} item {i} " + "words " * 20} for i in range(6)]
        for name in SECTIONS})

    async def scenario():
        decoded = jobs.live_tokens
        task = asyncio.create_task(jobs.run("tester", CONSOLIDATE, "state", long_answer))
        while jobs.live_tokens < decoded + 5:  # decoding, past its grammar's compile
            await asyncio.sleep(0.005)
        transport = httpx.ASGITransport(app=app.app, client=("127.0.0.1", 5000))
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
            answer = await client.post("/v1/chat/completions", json={
                "model": "tiny", "messages": [{"role": "user", "content": "quick"}],
                "script": client_script})
        return await task, answer.json()

    return served.run(scenario())


def test_a_preempted_job_decodes_at_most_one_more_engine_step_after_the_client_arrives(
        app, served, monkeypatch):
    jobs = app.app.state.tandem.jobs
    engine = jobs.engine
    # The moment the client request reaches the engine (as in test_engine_scheduling.py's
    # background-turn test), and each step's tokens the engine hands the job.
    admitted: list[float] = []
    job_deltas: list[float] = []
    count_started, count_job_tokens = engine.stats.started, jobs._count_tokens

    def stamp_admission(kind: str) -> None:
        if kind == "client":
            admitted.append(time.monotonic())
        count_started(kind)

    def stamp_job_delta(n: int) -> None:
        if n:
            job_deltas.append(time.monotonic())
        count_job_tokens(n)

    monkeypatch.setattr(engine.stats, "started", stamp_admission)
    monkeypatch.setattr(jobs, "_count_tokens", stamp_job_delta)
    # A client answer of many steps: a job left to decode beside it would show.
    script = " ".join(["A client answer of many words."] * 8)
    record, answer = preempt_a_consolidation(app, served, script)
    assert record.outcome == "preempted" and record.reason == "client_request"
    assert answer["choices"][0]["message"]["content"] == script
    after_client = sum(1 for t in job_deltas if t > admitted[0])
    # Ended at the next step: a delta or two may have been in flight, not dozens.
    assert after_client <= 3, after_client


def test_a_preempted_jobs_prompt_stays_in_the_prefix_cache(app, served, tiny_profile,
                                                          monkeypatch):
    prompts: list[list[int]] = []
    prompt_ids = EngineJobBackend.prompt_ids

    def recorded(self, prompt, room_for):
        prompts.append(prompt_ids(self, prompt, room_for))
        return prompts[-1]

    monkeypatch.setattr(EngineJobBackend, "prompt_ids", recorded)
    record, _ = preempt_a_consolidation(app, served, "Quick answer.")
    assert record.outcome == "preempted"
    [prompt] = prompts
    # The prompt is the conversation's record (cached by its client turns) and then the
    # job's instruction, which only the preempted job ever computed.
    conversation = app.memory.latest_record("tester", "continuous").ids
    assert prompt[:len(conversation)] == list(conversation)
    assert len(prompt) - len(conversation) >= 4 * tiny_profile.block_size

    async def cached_tokens(ids: list[int]) -> int:
        engine = app.app.state.tandem.engine
        # under the user's prefix-cache salt, as the job ran
        params = GenerationParams(max_tokens=1, cache_salt=app.memory.cache_salt("tester"))
        async for delta in engine.generate(ids, params):
            if delta.finished:
                return delta.cached_tokens
        raise AssertionError("no final delta")

    assert served.run(cached_tokens(prompt)) >= len(prompt) - tiny_profile.block_size


def test_the_job_routes_are_for_the_admin_and_refuse_bad_input(served, app, tmp_path):
    assert app.request("POST", "/v1/conductor/jobs/nope/run", json={}).status_code == 404
    assert app.request("GET", "/v1/conductor/jobs/runs", params={"limit": 0}).status_code == 400
    bad = app.request("PUT", f"/v1/conductor/jobs/{VERIFY}/model",
                      json={"base_url": "ftp://x", "model": "m"})
    assert bad.status_code == 400 and "http" in bad.json()["error"]["message"]
    ok = app.request("PUT", f"/v1/conductor/jobs/{VERIFY}/model",
                     json={"base_url": "http://127.0.0.1:9/v1", "model": "m"})
    assert ok.json()["model"] == "m at http://127.0.0.1:9/v1"
    unreachable = run(app, VERIFY)
    assert unreachable["outcome"] == "failed" and unreachable["provider"] == "endpoint"
    assert unreachable["reason"].startswith("endpoint_unreachable")
    app.request("PUT", f"/v1/conductor/jobs/{VERIFY}/model", json={"inherit": True})
    listed = app.request("GET", "/v1/conductor/jobs").json()["data"]
    assert next(j for j in listed if j["job"] == VERIFY)["model"] == "engine"
    remote = InProcessApp(served, tmp_path, client_host="192.168.1.20")
    assert remote.request("GET", "/v1/conductor/jobs").status_code == 403
    before = app.request("GET", "/v1/conductor/jobs").json()["data"]
    runs_before = app.request("GET", "/v1/conductor/jobs/runs").json()
    assert remote.request("PUT", f"/v1/conductor/jobs/{VERIFY}/model", json={
        "base_url": "http://10.0.0.9/v1", "model": "theirs"}).status_code == 403
    assert remote.request("POST", f"/v1/conductor/jobs/{VERIFY}/run",
                          json={}).status_code == 403
    assert app.request("GET", "/v1/conductor/jobs").json()["data"] == before
    assert app.request("GET", "/v1/conductor/jobs/runs").json() == runs_before


def test_every_file_a_job_run_writes_is_0600_in_folders_0700(app):
    """The store's rule for the whole memory folder (conductor/NOTES_STORE.md), after each
    job has run: artifacts, run records, state."""
    for job in JOBS:
        run(app, job)
    wrong = {}
    for dirpath, _dirs, files in os.walk(app.memory.root):
        for path in (Path(dirpath), *(Path(dirpath) / name for name in files)):
            mode = stat.S_IMODE(os.lstat(path).st_mode)
            if not path.is_symlink() and mode != (0o700 if path.is_dir() else 0o600):
                wrong[str(path.relative_to(app.memory.root))] = oct(mode)
    assert wrong == {}
