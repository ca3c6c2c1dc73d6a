"""The background writer on the real engine, its output scripted through the tiny profile."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from engine.engine import GenerationParams
from tests.inprocess import InProcessApp

BLOCK = ('<tandem_memory op="add" scope="session" kind="gotcha">\ntitle: {title}\n\n'
         "The integration tests need the local database running.\n</tandem_memory>")


def user(text: str) -> list[dict]:
    return [{"role": "user", "content": text}]


@pytest.fixture
def app(served, tmp_path) -> InProcessApp:
    app = InProcessApp(served, tmp_path)
    app.app.state.tandem.writer.writer.mode = "on"
    return app


def converse(app: InProcessApp, session: str) -> tuple[list[dict], dict]:
    history = user("The integration tests fail unless the local database runs.")
    content, usage, _ = app.chat(history, "Start it with make db first.",
                                 headers={"X-Tandem-Session": session})
    return [*history, {"role": "assistant", "content": content}], usage


def run_writer(app: InProcessApp, session: str, **body) -> dict:
    response = app.request("POST", "/v1/conductor/writer/run",
                           json={"session": session, **body})
    assert response.status_code == 200, response.text
    return response.json()


def run_files(app: InProcessApp) -> list[dict]:
    folder = app.memory.root / "cognition" / "runs"
    return [json.loads(p.read_text()) for p in sorted(folder.rglob("*.json"))]


def test_a_confident_no_at_the_gate_skips_the_turn(app):
    converse(app, "gate")
    run = run_writer(app, "gate", gate_script="no", script=BLOCK.replace("{title}", "x"))
    assert run["outcome"] == "gated" and run["gate_answer"] == "no"
    assert run["gate_probability"] >= 0.8 and run["tokens_generated"] == 0
    assert app.memory.store("tester").list() == []
    assert run_files(app)[-1]["outcome"] == "gated"


def test_the_writer_stores_provisional_notes_from_its_blocks(app):
    converse(app, "write")
    run = run_writer(app, "write", gate_script="yes",
                     script=BLOCK.replace("{title}", "tests need the local database"))
    assert run["outcome"] == "wrote" and run["notes_written"] == 1
    assert run["record_tokens"] > 0 and run["tokens_generated"] > 10
    (note,) = app.memory.store("tester").list()
    assert note.source == "writer" and note.status == "provisional"
    record = run_files(app)[-1]
    assert record["note_ids"] == [note.id]
    assert "local database" not in json.dumps(record)  # ids and counts, never text
    assert_private_tree(app.memory.root)


def test_a_rule_about_the_user_is_refused_in_a_writer_turn(app):
    converse(app, "rule")
    script = ('<tandem_memory op="add" scope="user" kind="rule">\ntitle: always use tabs\n\n'
              "The user wants tabs.\n</tandem_memory>")
    run = run_writer(app, "rule", gate_script="yes", script=script)
    assert run["outcome"] == "refused" and app.memory.store("tester").list() == []


def test_shadow_mode_counts_blocks_and_stores_nothing(app):
    app.app.state.tandem.writer.writer.mode = "shadow"
    converse(app, "shadow")
    script = BLOCK.replace("{title}", "one") + BLOCK.replace("{title}", "two")
    run = run_writer(app, "shadow", gate_script="yes", script=script)
    assert run["outcome"] == "shadow" and run["blocks_seen"] == 2
    assert app.memory.store("tester").list() == []
    shadow = (app.memory.root / "cognition" / "writer-shadow.jsonl").read_text()
    assert '"blocks": 2' in shadow and "one" not in shadow
    assert_private_tree(app.memory.root)


def assert_private_tree(root) -> None:
    """Every folder under memory/ is 0700 and every file 0600, whoever wrote it."""
    import os
    import stat

    files = 0
    for folder, _dirs, names in os.walk(root):
        assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700, folder
        for name in names:
            assert stat.S_IMODE(os.stat(os.path.join(folder, name)).st_mode) == 0o600, name
            files += 1
    assert files > 0


def test_a_tool_call_written_another_way_ends_the_turn_at_its_name(app):
    converse(app, "call")
    script = ('<tool_call>\n{"name": "delete_database", "arguments": {"force": true}}\n'
              "</tool_call>" + " and then a very long explanation" * 40)
    run = run_writer(app, "call", gate_script="yes", script=script)
    assert run["stopped_at_tool_call"] and run["outcome"] == "wrote_nothing"
    assert run["tokens_generated"] < 20


def test_the_admin_routes_set_the_mode_and_refuse_scripts_elsewhere(app, served, tmp_path):
    assert app.request("PUT", "/v1/conductor/writer", json={"mode": "shadow"}).json() == {
        "mode": "shadow"}
    assert app.request("GET", "/v1/conductor/writer").json()["mode"] == "shadow"
    assert app.request("PUT", "/v1/conductor/writer", json={"mode": "loud"}).status_code == 400
    plain = InProcessApp(served, tmp_path / "plain", scripted=False)
    plain.app.state.tandem.writer.writer.mode = "on"
    response = plain.request("POST", "/v1/conductor/writer/run",
                             json={"session": "s", "script": "x"})
    assert response.status_code == 400
    remote = InProcessApp(served, tmp_path / "remote", client_host="192.0.2.7")
    assert remote.request("GET", "/v1/conductor/writer").status_code == 403


def test_a_client_request_preempts_the_writer_and_keeps_the_prefix_cache(app, served,
                                                                         tiny_profile):
    history, first = converse(app, "preempt")
    writer = app.app.state.tandem.writer.writer
    long_script = BLOCK.replace("{title}", "long") + " more detail" * 600

    async def scenario():
        task = asyncio.create_task(app.app.state.tandem.writer.run(
            "tester", "preempt", "admin", script=long_script, gate_script="yes"))
        while writer.live_tokens < 5:
            await asyncio.sleep(0.005)
        transport = httpx.ASGITransport(app=app.app, client=("127.0.0.1", 5000))
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
            at_arrival = writer.live_tokens
            answer = await client.post("/v1/chat/completions", json={
                "model": "tiny", "messages": user("quick question"), "script": "Quick answer."})
        run = await task
        return run, at_arrival, answer.json()

    run, at_arrival, answer = served.run(scenario())
    assert run.outcome == "preempted"
    assert run.tokens_generated - at_arrival <= 2  # stopped within two engine steps
    assert answer["choices"][0]["message"]["content"] == "Quick answer."
    _, second, _ = app.chat([*history, *user("And after that?")], "Then run the tests.",
                            headers={"X-Tandem-Session": "preempt"})
    floor = first["prompt_tokens"] + first["completion_tokens"] - tiny_profile.block_size
    assert second["prompt_tokens_details"]["cached_tokens"] >= floor


def test_a_client_that_arrives_during_the_gate_keeps_the_writers_turn_from_starting(
        app, served):
    """Checked again after the gate: a client whose turn is still being laid out (at the
    door, not yet in the engine) would otherwise share the CPUs with a long background
    turn, and a paid backend be sent (and bill) a request only to close it."""
    converse(app, "door")
    tandem = app.app.state.tandem
    backend = tandem.writer.writer.backend
    gate = backend.gate

    async def gate_then_a_client_comes(prompt_ids, script):
        answer = await gate(prompt_ids, script)
        tandem.load.hold()  # as the door holds it for a generation request that came in
        return answer

    backend.gate = gate_then_a_client_comes
    try:
        run = served.run(tandem.writer.run("tester", "door", "admin", gate_script="yes",
                                           script=BLOCK.replace("{title}", "door")))
    finally:
        tandem.load.release()
        backend.gate = gate
    assert run.gate_answer == "yes" and run.outcome == "preempted"
    assert run.tokens_generated == 0 and app.memory.store("tester").list() == []


def test_a_preempted_writer_turn_leaves_its_task_text_in_the_prefix_cache(app, served,
                                                                           tiny_profile):
    converse(app, "task-cache")
    writer = app.app.state.tandem.writer.writer
    backend = writer.backend
    generate = backend.generate
    prompts: list[list[int]] = []

    def recorded(prompt_ids, max_tokens, script, grammar=None):
        prompts.append(list(prompt_ids))
        return generate(prompt_ids, max_tokens, script, grammar)

    backend.generate = recorded
    long_script = BLOCK.replace("{title}", "long") + " more detail" * 600

    async def scenario():
        service = app.app.state.tandem.writer  # as the idle loop runs it: under the salt
        task = asyncio.create_task(service.run("tester", "task-cache", "admin",
                                               script=long_script, gate_script="yes"))
        while writer.live_tokens < 5:
            await asyncio.sleep(0.005)
        transport = httpx.ASGITransport(app=app.app, client=("127.0.0.1", 5000))
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
            await client.post("/v1/chat/completions", json={
                "model": "tiny", "messages": user("quick question"), "script": "Quick."})
        return await task

    assert served.run(scenario()).outcome == "preempted"
    [prompt] = prompts
    # The writer's prompt: the session's record, then its own task text (the writer's
    # instruction and the matching notes), which no client turn ever computed.
    record = app.memory.latest_record("tester", "task-cache").ids
    assert prompt[:len(record)] == list(record)
    assert len(prompt) - len(record) >= 2 * tiny_profile.block_size

    async def cached_tokens(ids: list[int]) -> int:
        engine = app.app.state.tandem.engine
        # under the user's prefix-cache salt, as the writer ran
        params = GenerationParams(max_tokens=1, cache_salt=app.memory.cache_salt("tester"))
        async for delta in engine.generate(ids, params):
            if delta.finished:
                return delta.cached_tokens
        raise AssertionError("no final delta")

    assert served.run(cached_tokens(prompt)) >= len(prompt) - tiny_profile.block_size


def test_one_background_turn_at_a_time(app, served):
    converse(app, "one-a")
    converse(app, "one-b")
    writer = app.app.state.tandem.writer.writer
    backend = writer.backend
    original = backend.generate
    live = {"now": 0, "max": 0}

    async def counted(*args, **kwargs):
        live["now"] += 1
        live["max"] = max(live["max"], live["now"])
        try:
            async for piece in original(*args, **kwargs):
                yield piece
        finally:
            live["now"] -= 1

    backend.generate = counted
    script = BLOCK.replace("{title}", "parallel") + " detail" * 30

    async def both():
        return await asyncio.gather(
            writer.run("tester", "one-a", "admin", script=script, gate_script="yes"),
            writer.run("tester", "one-b", "admin", script=script, gate_script="yes"))

    runs = served.run(both())
    assert [r.outcome for r in runs] == ["wrote", "wrote"]
    assert live["max"] == 1


def test_the_idle_loop_visits_a_session_after_a_give_up(app, served):
    converse(app, "loop")
    app.memory.idle.triggers.give_up("tester", "loop")
    runs = served.run(app.app.state.tandem.writer.tick())
    assert [(r.session, r.trigger) for r in runs] == [("loop", "give_up")]
    assert app.memory.idle.triggers.due() == []


def test_a_writer_block_that_is_mostly_a_secret_is_refused(app):
    converse(app, "secret")
    secret = ("key id AKIA" + "IOSFODNN7EXAMPLE secret " + "wJalrXUtnFEMI/K7MDENG/bPxRfiCY"
              + "EXAMPLEKEY")
    script = BLOCK.replace("{title}", "aws access").replace(
        "The integration tests need the local database running.", secret)
    run = run_writer(app, "secret", gate_script="yes", script=script)
    assert run["outcome"] == "refused" and run["refusals"] == ["secret"]
    assert app.memory.store("tester").list() == []
    assert "wJalr" not in json.dumps(run_files(app)[-1])


def test_the_idle_loop_runs_the_writer_over_the_history_a_compaction_dropped(app, served):
    session = {"X-Tandem-Session": "compacted"}
    history: list[dict] = []
    for turn in range(2):  # the dropped history: the only place "zanzibar" is written
        history.append({"role": "user", "content": f"Tell me about zanzibar part {turn}. " * 15})
        content, _, _ = app.chat(history, f"Zanzibar part {turn} is long. " * 40,
                                 headers=session)
        history.append({"role": "assistant", "content": content})
    dropped = app.memory.latest_record("tester", "compacted")
    summary = [{"role": "system", "content": "Summary: we talked about an island."},
               {"role": "user", "content": "Go on about the quokka."}]
    app.chat(summary, "Going on about the quokka.", headers=session)
    latest = app.memory.latest_record("tester", "compacted")
    decode = app.app.state.tandem.engine.tokenizer.decode
    assert "quokka" in decode(list(latest.ids)) and "zanzibar" not in decode(list(latest.ids))
    assert app.memory.idle.triggers.due() == [("tester", "compacted", "compaction")]

    writer = app.app.state.tandem.writer.writer
    backend = writer.backend
    gate, generate = backend.gate, backend.generate
    prompts: list[list[int]] = []
    received: list = []

    async def gate_yes(prompt_ids, _script):
        prompts.append(prompt_ids)
        return await gate(prompt_ids, "yes")

    def generate_block(prompt_ids, max_tokens, _script, _grammar=None):
        prompts.append(prompt_ids)
        return generate(prompt_ids, max_tokens, BLOCK.replace("{title}", "zanzibar is long"))

    run = writer.run

    async def run_seen(*args, **kwargs):
        received.append(kwargs.get("record"))
        return await run(*args, **kwargs)

    backend.gate, backend.generate, writer.run = gate_yes, generate_block, run_seen
    runs = served.run(app.app.state.tandem.writer.tick())
    assert [(r.session, r.trigger, r.outcome) for r in runs] == [
        ("compacted", "compaction", "wrote")]
    assert received == [dropped]  # Writer.run is handed the dropped record...
    assert runs[0].record_tokens == len(dropped.ids)
    assert len(prompts) == 2  # ...and the gate's and the task's prompts open with it
    for prompt in prompts:
        assert prompt[: len(dropped.ids)] == list(dropped.ids)
        text = decode(prompt)
        assert "zanzibar part 1" in text and "quokka" not in text
    assert app.memory.idle.triggers.due() == []  # visited once


def test_an_unscripted_writer_turn_writes_only_well_formed_blocks_even_on_random_weights(
        app):
    """Under the writer's grammar the tiny model's random weights still write blocks the
    parser takes, or "nothing to remember" (conductor/writing/writer_grammar.py)."""
    converse(app, "grammar")
    writer = app.app.state.tandem.writer.writer
    writer.max_tokens = 2048  # the grammar is under test here, not the token budget
    malformed = {"malformed_block", "missing_title", "unknown_kind", "unknown_scope",
                 "unknown_op", "missing_id"}
    for _ in range(3):
        run = run_writer(app, "grammar", gate_script="yes")  # no script: the model writes
        assert run["outcome"] in ("wrote", "wrote_nothing", "refused"), run
        assert run["blocks_seen"] > 0 or run["said_nothing"], run
        assert not malformed & set(run["refusals"]), run


def test_a_project_note_the_writer_writes_lands_in_the_conversations_project(app):
    history = user("The alpha service listens on port 8443.")
    app.chat(history, "Noted.", headers={"X-Tandem-Session": "proj",
                                         "X-Tandem-Project": "/work/alpha"})
    block = BLOCK.replace('scope="session"', 'scope="project"').replace(
        "{title}", "alpha listens on 8443")
    run = run_writer(app, "proj", gate_script="yes", script=block)
    assert run["outcome"] == "wrote", run
    [note] = app.memory.store("tester").list(scope="project")
    assert note.title == "alpha listens on 8443" and note.project
