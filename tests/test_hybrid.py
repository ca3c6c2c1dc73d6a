"""The tiny-hybrid profile: a hybrid-attention Qwen (Gated DeltaNet layers with a recurrent
state, one full-attention layer in four) served by vLLM's CPU path with its prefix cache in
align mode. A pytest session of its own (`-m hybrid`, run by make test): its engine is a
second vLLM beside the tiny one's, and each session starts one engine."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from engine.qwen_tokens import TOOL_CALL_END

pytestmark = pytest.mark.hybrid

# vLLM raises the block size of this model to 640 tokens on the CPU (a block's attention
# pages must hold one recurrent state); the cache is reused a whole block at a time.
BLOCK = 640


@pytest.fixture(scope="module")
def hybrid_home(tmp_path_factory) -> Path:
    """A TANDEM_HOME sharing the built models (the tiny-hybrid one built if missing)."""
    from engine.home import tandem_home
    from engine.model_builder import ensure_model, models_dir

    ensure_model(tandem_home(), "tiny-hybrid", progress=lambda _m: None)
    home = tmp_path_factory.mktemp("hybrid-home")
    (home / "models").symlink_to(models_dir(tandem_home()), target_is_directory=True)
    return home


@pytest.fixture(scope="module")
def hybrid(hybrid_home: Path):
    from tests.served import serving

    with serving("tiny-hybrid", hybrid_home) as server:
        yield server


def test_the_tiny_hybrid_model_has_the_published_layout(hybrid_home):
    from engine.model_builder import is_intact, model_path

    folder = model_path(hybrid_home, "tiny-hybrid")
    assert is_intact(folder)
    config = json.loads((folder / "config.json").read_text())
    assert config["architectures"] == ["Qwen3NextForCausalLM"]
    assert config["layer_types"] == ["linear_attention"] * 3 + ["full_attention"]
    assert config["vocab_size"] == 151936  # Qwen's tokenizer, as the tiny Qwen3's


def chat(server, text: str, memory: str = "off", **extra) -> httpx.Response:
    return httpx.post(f"{server.base_url}/v1/chat/completions", headers={
        "X-Tandem-Memory": memory}, json={
        "model": "tiny-hybrid", "messages": [{"role": "user", "content": text}],
        "max_tokens": 4, "temperature": 0, **extra}, timeout=120)


def cached(response: httpx.Response) -> tuple[int, int]:
    assert response.status_code == 200, response.text
    usage = response.json()["usage"]
    return usage["prompt_tokens"], usage["prompt_tokens_details"]["cached_tokens"]


def long_text(tag: str, words: int = 700) -> str:
    return " ".join(f"{tag}{i}" for i in range(words))


def test_a_repeated_prompt_is_read_from_the_cache_a_whole_block_at_a_time(hybrid):
    """vLLM keeps the recurrent state at the prompt's last block boundary (its align mode
    ends a prefill chunk there), so the repeat reads every whole block but the last token's
    from the cache; a prompt that differs from its first token shares nothing."""
    from server.cli.profiles_check import shape_of

    engine = hybrid.app.state.tandem.engine
    vllm_block = engine._llm.vllm_config.cache_config.block_size
    assert vllm_block == BLOCK == engine.profile.block_size
    assert shape_of(engine.profile, Path()).block_size("cpu") == BLOCK  # profiles check's
    prompt_tokens, first = cached(chat(hybrid, long_text("alpha")))
    assert prompt_tokens > 2 * BLOCK and first == 0
    tokens, again = cached(chat(hybrid, long_text("alpha")))
    assert tokens == prompt_tokens and again == (prompt_tokens - 1) // BLOCK * BLOCK
    _, other = cached(chat(hybrid, long_text("beta")))
    assert other == 0


def test_a_prompt_shorter_than_a_block_gets_no_hit(hybrid):
    """The figure a short prompt gets on these models: nothing, even when sent twice."""
    short = long_text("gamma", 100)
    prompt_tokens, _ = cached(chat(hybrid, short))
    assert prompt_tokens < BLOCK
    assert cached(chat(hybrid, short)) == (prompt_tokens, 0)


def test_a_later_turn_with_memory_on_reads_the_earlier_turns_from_the_cache(hybrid):
    """Memory on: the second turn's prompt starts with the first turn's exact ids (the
    ledger's replay), so every whole block of them is cached."""
    session = {"X-Tandem-Session": "hybrid-later-turn"}  # the profile's memory: on
    messages = [{"role": "user", "content": long_text("delta", 900)}]
    body = {"model": "tiny-hybrid", "max_tokens": 4, "temperature": 0}
    first = httpx.post(f"{hybrid.base_url}/v1/chat/completions", headers=session,
                       json={**body, "messages": messages}, timeout=120)
    first_tokens, _ = cached(first)
    answer = first.json()["choices"][0]["message"]["content"]
    messages += [{"role": "assistant", "content": answer},
                 {"role": "user", "content": "and then?"}]
    second = httpx.post(f"{hybrid.base_url}/v1/chat/completions", headers=session,
                        json={**body, "messages": messages}, timeout=120)
    tokens, hit = cached(second)
    assert first_tokens > 2 * BLOCK
    assert hit >= first_tokens // BLOCK * BLOCK - BLOCK and hit % BLOCK == 0, (tokens, hit)


def test_a_seed_is_a_400_naming_it_and_the_engine_lives_on(hybrid):
    """vLLM's CPU sampler cannot rewind a seeded generator over a chunked prefill (the
    engine core dies: 'CPU Generator does not use offset'), and this profile's prefix cache
    needs chunked prefill: the server refuses the seed instead of losing the engine."""
    refused = chat(hybrid, long_text("epsilon"), seed=7, temperature=0.8)
    assert refused.status_code == 400, refused.text
    assert "'seed'" in refused.json()["error"]["message"]
    assert "Traceback" not in refused.text
    assert cached(chat(hybrid, long_text("epsilon"), seed=7))[0] > BLOCK  # greedy: no generator
    assert cached(chat(hybrid, "still here?", temperature=0.8))[0] > 0
    assert httpx.get(f"{hybrid.base_url}/readyz", timeout=10).status_code == 200


def new_session(server, session: str, question: str) -> tuple[int, int]:
    """A new session's first turn (memory on: the engine's tools, the card) as
    (prompt tokens, cached)."""
    return cached(httpx.post(f"{server.base_url}/v1/chat/completions", headers={
        "X-Tandem-Session": session}, json={
        "model": "tiny-hybrid", "max_tokens": 4, "temperature": 0,
        "messages": [{"role": "system", "content": "You help with the service."},
                     {"role": "user", "content": question}]}, timeout=120))


def test_a_new_session_finds_the_shared_context_cached_to_its_block_boundary(hybrid):
    """The boundary-aware layout: the head and the shared context end on a block boundary
    (padded inside the hidden message), and the prewarm after a fresh layout ends one token
    past it, so vLLM keeps the recurrent state there and the user's second new session
    reads all of it from the cache (the first session's prompt runs past the next boundary,
    where vLLM kept that prompt's own state). Plain vLLM's layout gives that session
    nothing (one state per prompt, in its own tokens), the third the head's block floor."""
    tandem = hybrid.app.state.tandem
    assert tandem.engine.reuse_block == BLOCK  # read from vLLM's raised block size
    user = tandem.memory.settings.user_name
    # a first message past the next boundary: that prompt's own state is kept there
    first_tokens, first = new_session(hybrid, "aligned-a", long_text("zeta", 300))
    record = tandem.memory.latest_record(user, "aligned-a")
    (shared,) = [s for s in record.spans if s.kind == "shared"]
    assert shared.end % BLOCK == 0 and first == 0  # laid out to the boundary
    assert first_tokens > shared.end + BLOCK
    hybrid.run(tandem.prewarm.tick())  # idle time (the loop may have run it already)
    _, second = new_session(hybrid, "aligned-b", "And the database?")
    assert second == shared.end, (shared.end, second)
    _, third = new_session(hybrid, "aligned-c", "Anything else listening?")
    assert third == shared.end



# The writer's turn and the engine's memory tools, as the dense lane checks them
# (tests/test_writer.py, tests/test_engine_tools.py), on the hybrid model's cache.

WRITER_BLOCK = ('<tandem_memory op="add" scope="session" kind="gotcha">\ntitle: {title}\n\n'
                "The integration tests need the local database running.\n</tandem_memory>")


def tool_call(name: str, **arguments) -> str:
    return f'<tool_call>\n{json.dumps({"name": name, "arguments": arguments})}\n</tool_call>'


@pytest.fixture
def hybrid_app(hybrid, tmp_path):
    """An app of its own (a fresh home, user `tester`) over the lane's engine."""
    from tests.inprocess import InProcessApp

    return InProcessApp(hybrid, tmp_path)


def scripted(app, messages: list[dict], script, session: str) -> tuple[str, dict, httpx.Response]:
    return app.chat(messages, script, headers={"X-Tandem-Session": session},
                    model="tiny-hybrid")


def test_the_writer_s_turn_reads_the_record_from_the_cache_and_writes_its_note(hybrid_app):
    """The writer's gate and turn open with the session's record (tests/test_writer.py):
    here each reads it from the cache up to the last block boundary of the client's
    prompt, where vLLM kept that prompt's recurrent state (the answer's tokens after it are
    prefilled again: one state per request), and the note is written."""
    app = hybrid_app
    writer = app.app.state.tandem.writer
    writer.writer.mode = "on"
    history = [{"role": "user", "content": long_text("eta", 900)}]
    _, first, _ = scripted(app, history, "Start it with make db first.", "hybrid-writer")
    response = app.request("POST", "/v1/conductor/writer/run", json={
        "session": "hybrid-writer", "gate_script": "yes",
        "script": WRITER_BLOCK.replace("{title}", "tests need the local database")})
    assert response.status_code == 200, response.text
    run = response.json()
    assert run["outcome"] == "wrote" and run["notes_written"] == 1
    (note,) = app.memory.store("tester").list()
    assert note.source == "writer" and note.status == "provisional"
    floor = (first["prompt_tokens"] - 1) // BLOCK * BLOCK
    assert floor >= 4 * BLOCK
    gate, turn = writer.writer.backend.usage  # under the user's salt, as the idle loop runs it
    assert gate.cached_tokens == turn.cached_tokens == floor, (first, gate, turn)


def test_a_client_request_preempts_the_writer_and_the_session_stays_cached(hybrid, hybrid_app):
    """tests/test_writer.py's preemption on the hybrid model: a client request ends the
    writer's turn within two engine steps, and the session's next turn still reads the
    record from the cache to the last block boundary of its first prompt."""
    import asyncio

    app = hybrid_app
    service = app.app.state.tandem.writer
    service.writer.mode = "on"
    history = [{"role": "user", "content": long_text("iota", 900)}]
    content, first, _ = scripted(app, history, "Start it with make db first.",
                                 "hybrid-preempt")
    long_script = WRITER_BLOCK.replace("{title}", "long") + " more detail" * 600

    async def scenario():
        task = asyncio.create_task(service.run("tester", "hybrid-preempt", "admin",
                                               script=long_script, gate_script="yes"))
        while service.writer.live_tokens < 5:
            await asyncio.sleep(0.005)
        transport = httpx.ASGITransport(app=app.app, client=("127.0.0.1", 5000))
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost",
                                     timeout=120) as client:
            at_arrival = service.writer.live_tokens
            answer = await client.post("/v1/chat/completions", json={
                "model": "tiny-hybrid", "script": "Quick answer.",
                "messages": [{"role": "user", "content": "quick question"}]})
        return await task, at_arrival, answer.json()

    run, at_arrival, answer = hybrid.run(scenario())
    assert run.outcome == "preempted"
    assert run.tokens_generated - at_arrival <= 2  # stopped within two engine steps
    assert answer["choices"][0]["message"]["content"] == "Quick answer."
    history += [{"role": "assistant", "content": content},
                {"role": "user", "content": "And after that?"}]
    _, second, _ = scripted(app, history, "Then run the tests.", "hybrid-preempt")
    assert second["prompt_tokens_details"]["cached_tokens"] == (
        first["prompt_tokens"] - 1) // BLOCK * BLOCK


def test_an_engine_memory_search_is_one_answer_and_the_turns_after_read_it_cached(
        hybrid_app):
    """The engine's memory tools in the model's turn (tests/test_engine_tools.py): the
    search runs, the answer goes on after its response as one answer with its status line;
    the continuation reads the turn's prompt from the cache to its last block boundary, so
    it prefills at most a block more than the exchange, and the next turn reads the
    continuation's prompt to its last boundary."""
    app = hybrid_app
    store = app.memory.store("tester")
    assert store.add(title="build needs node 20", kind="gotcha", scope="user", source="cli",
                     body="The build fails on node 18: it needs node 20 (the lockfile v3).",
                     has_user_message=True).ok
    app.app.state.tandem.search.index("tester").sync()
    engine = app.app.state.tandem.engine
    question = [{"role": "user", "content": long_text("theta", 700)
                 + " Which node does the build need?"}]
    script = [tool_call("memory_search", query="node version for the build"), "Node 20."]
    content, _, response = scripted(app, question, script, "hybrid-tools")
    assert content == "› searched memory: node version for the build\nNode 20."
    assert "tool_calls" not in response.json()["choices"][0]["message"]
    record = app.memory.latest_record("tester", "hybrid-tools")
    (span,) = [s for s in record.spans if s.kind == "tool"]
    exchange = list(record.ids[span.start:span.end])
    assert "build needs node 20" in engine.tokenizer.decode(exchange)
    # the call is the answer's first output: the turn's prompt ends where the span starts
    prompt_tokens = span.start
    continuation = engine.stats.recent[response.json()["id"] + "-1"]
    assert prompt_tokens > 4 * BLOCK and continuation.prompt_tokens == span.end
    assert continuation.cached_tokens == (prompt_tokens - 1) // BLOCK * BLOCK
    response_part = len(exchange) - (exchange.index(TOOL_CALL_END) + 1)
    prefilled = continuation.prompt_tokens - continuation.cached_tokens
    assert response_part <= prefilled <= response_part + BLOCK, (prefilled, response_part)
    history = [*question, {"role": "assistant", "content": content},
               {"role": "user", "content": "And npm?"}]
    _, later, _ = scripted(app, history, "npm 10.", "hybrid-tools")
    assert later["prompt_tokens_details"]["cached_tokens"] == (
        continuation.prompt_tokens - 1) // BLOCK * BLOCK


# The record's prefill (server/idle/record_prefill.py): after an answer, in idle
# time, the session's record and one token more, so the next turn reads its replayed ids
# from the cache to the last boundary before its own tokens, not before the answer.

LONG_ANSWER = "Run the migrations first, then the tests. " * 75  # past a 640-token block


def record_prefill_turn(app, session: str, words: int = 300) -> tuple[list[dict], dict, int]:
    """A first turn whose answer runs past a block boundary: (history, usage, the length
    of what the next turn replays)."""
    from server.turn.replay import next_turn_replays

    history = [{"role": "user", "content": long_text(session.split("-")[-1], words)}]
    content, usage, _ = scripted(app, history, LONG_ANSWER, session)
    record = app.memory.latest_record("tester", session)
    replayed = next_turn_replays(app.app.state.tandem.engine.tokenizer, record)
    assert replayed is not None and replayed[: usage["prompt_tokens"]] == list(
        record.ids[: usage["prompt_tokens"]])
    return [*history, {"role": "assistant", "content": content}], usage, len(replayed)


def test_after_the_record_s_prefill_the_next_turn_reads_its_answer_from_the_cache(
        hybrid, hybrid_app):
    """vLLM keeps the turn's recurrent state at its prompt's last boundary, before the
    answer; the idle-time prefill of the record (prompt and answer, as the next turn
    replays them) and one token more leaves one at the last boundary before the next turn's
    own tokens: the next turn reads every whole block of the answer from the cache."""
    app = hybrid_app
    service = app.app.state.tandem.record_prefill
    assert app.memory.idle.records_due.on  # a hybrid engine: the job is on
    history, first, replayed = record_prefill_turn(app, "hybrid-record")
    prompt_floor = (first["prompt_tokens"] - 1) // BLOCK * BLOCK
    assert replayed // BLOCK * BLOCK > prompt_floor  # the answer crosses a boundary
    runs = hybrid.run(service.tick())  # the idle moment after the answer
    assert len(runs) == 1, (first, replayed, service.client_busy())
    (run,) = runs
    assert run.outcome == "done" and run.prompt_tokens == replayed + 1
    assert run.cached_tokens == prompt_floor  # the turn's own state, before the answer
    assert hybrid.run(service.tick()) == []  # prefilled once
    history.append({"role": "user", "content": "And after that?"})
    _, second, _ = scripted(app, history, "Then deploy.", "hybrid-record")
    assert second["prompt_tokens_details"]["cached_tokens"] == replayed // BLOCK * BLOCK, (
        first, second, replayed)


def test_a_client_request_during_the_record_s_prefill_is_not_held_behind_it(
        hybrid, hybrid_app):
    """The prefill is background work: a client request that arrives while it runs is
    admitted at the next engine step (the prefill, one token long, is ended or finishes in
    the step in flight) and answered whole; a prefill that gave way stays due."""
    import asyncio

    app = hybrid_app
    service = app.app.state.tandem.record_prefill
    engine = app.app.state.tandem.engine
    _, _, replayed = record_prefill_turn(app, "hybrid-racing")
    script = "The client's answer, whole and in order."

    async def scenario():
        prefilling = asyncio.create_task(service.tick())
        while not engine.running("background"):
            await asyncio.sleep(0.001)
        content, _, response = await asyncio.to_thread(
            app.chat, [{"role": "user", "content": "quick question"}], script,
            model="tiny-hybrid")
        return content, response.json()["id"], await prefilling

    content, client_id, runs = hybrid.run(scenario())
    assert content == script
    assert len(runs) == 1 and runs[0].outcome in ("done", "preempted")
    client = engine.stats.recent[client_id]
    job = [t for t in engine.stats.recent.values()
           if t.kind == "background" and t.prompt_tokens == replayed + 1][-1]
    # the prefill did not run on beside the client's answer: over by its first token
    assert job.finished_at is not None and job.finished_at <= client.first_token_at
    # next: the client's own record (a turn too), and the prefill that gave way, if it did
    rest = hybrid.run(service.tick())
    assert all(r.outcome == "done" for r in rest)
    assert (runs[0].outcome == "preempted") == any(r.prompt_tokens == replayed + 1
                                                   for r in rest)
    assert hybrid.run(service.tick()) == []
