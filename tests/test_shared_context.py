"""Prefix reuse across sessions, on the real engine: sessions for clients that send no id,
the shared memory context every session finds in the cache, and its prewarm. The tests of
what a prompt holds run once a chat template (the embedded one, Qwen3's and Qwen2.5's as
published); the prewarm's scheduling runs on the embedded one."""

from __future__ import annotations

import asyncio
import uuid

import openai
import pytest

from tests.inprocess import WITH_INDEX, InProcessApp

TOOLS = [{"type": "function", "function": {
    "name": "read_file", "description": "Read a file",
    "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}}]
ANSWERS = ["First answer, short.", "Second answer " + "with more words " * 8,
           "Third answer."]


def opening(kind: str, nonce: str) -> tuple[list[dict], dict]:
    """The messages before the first user message, and extra request fields."""
    if kind == "system":
        return [{"role": "system", "content": f"You are terse. [{nonce}]"}], {}
    if kind == "developer":
        return [{"role": "developer", "content": f"Answer in English. [{nonce}]"}], {}
    if kind == "tools":
        return [], {"tools": TOOLS}
    return [], {}


def sdk_turn(sdk: openai.OpenAI, messages: list[dict], script: str, stream: bool, extra: dict):
    """(content, usage, memory token) as the plainest SDK call sees them: no headers."""
    if not stream:
        raw = sdk.chat.completions.with_raw_response.create(
            model="tiny", messages=messages, extra_body={"script": script}, **extra)
        completion = raw.parse()
        return (completion.choices[0].message.content, completion.usage,
                raw.headers.get("x-tandem-memory-token"))
    raw = sdk.chat.completions.with_raw_response.create(
        model="tiny", messages=messages, stream=True, stream_options={"include_usage": True},
        extra_body={"script": script}, **extra)
    content, usage = "", None
    for chunk in raw.parse():
        if chunk.choices:
            content += chunk.choices[0].delta.content or ""
        usage = chunk.usage or usage
    return content, usage, raw.headers.get("x-tandem-memory-token")


@pytest.fixture
def sdk(template_served) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{template_served.base_url}/v1", api_key="unused")


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
@pytest.mark.parametrize("kind", ["none", "system", "developer", "tools"])
def test_a_client_without_a_session_id_keeps_its_prefix_cache_every_turn(sdk, tiny_profile,
                                                                        kind, stream):
    nonce = uuid.uuid4().hex[:8]
    head, extra = opening(kind, nonce)
    history = [*head, {"role": "user", "content": f"Where is the build script? ({nonce})"}]
    previous, tokens = None, set()
    for turn, answer in enumerate(ANSWERS):
        content, usage, token = sdk_turn(sdk, history, answer, stream, extra)
        assert content.startswith(answer.split()[0])
        if turn:  # the first answer names the session from the second turn on
            tokens.add(token)
        if previous is not None:
            floor = (previous.prompt_tokens + previous.completion_tokens
                     - tiny_profile.block_size)
            assert usage.prompt_tokens_details.cached_tokens >= floor, (turn, usage, previous)
            # The card and the index came once: this turn's new tokens are the new message.
            assert usage.prompt_tokens - previous.prompt_tokens - previous.completion_tokens < 40
        previous = usage
        history += [{"role": "assistant", "content": content},
                    {"role": "user", "content": f"And turn {turn + 2}?"}]
    assert len(tokens) == 1 and None not in tokens  # one session from the second turn on


def derived(messages: list[dict], user: str = "tester", project: str | None = None,
            **extra) -> str:
    from conductor.memory.context import derive_session
    from server.http.schema import ChatCompletionRequest
    from server.turn.memory import request_messages

    request = ChatCompletionRequest.model_validate({"model": "tiny", "messages": messages,
                                                    **extra})
    return derive_session(user, project, request_messages(request))


SYSTEM = {"role": "system", "content": "You are terse."}
FIRST = {"role": "user", "content": "Where is the build script?"}
ANSWER = {"role": "assistant", "content": "In the Makefile."}


def test_another_opening_derives_another_session():
    """Unit test, no engine: the system prompt, the first user message, the first answer,
    the user and the project name the session; change any and it is another session."""
    ids = {derived([SYSTEM, FIRST]),
           derived([{"role": "system", "content": "You are verbose."}, FIRST]),
           derived([SYSTEM, {"role": "user", "content": "Where is the test script?"}]),
           derived([FIRST]),
           derived([{"role": "developer", "content": "Answer in English."}, FIRST]),
           derived([SYSTEM, FIRST, ANSWER]),
           derived([SYSTEM, FIRST, {**ANSWER, "content": "In build.sh."}]),
           derived([SYSTEM, FIRST], user="someone-else"),
           derived([SYSTEM, FIRST], project="alpha"),
           derived([SYSTEM, FIRST], project="beta")}
    assert len(ids) == 10


def test_conversations_after_the_same_canned_greeting_are_told_apart_by_the_first_question():
    """Unit test, no engine: a chat app's greeting opens every conversation; the user's
    first message is what tells them apart."""
    greeting = {"role": "assistant", "content": "Hi! How can I help?"}
    assert (derived([SYSTEM, greeting, FIRST])
            != derived([SYSTEM, greeting, {"role": "user", "content": "hi"}]))
    # and the answer after the first question, not the greeting, is the first answer
    assert (derived([SYSTEM, greeting, FIRST, ANSWER])
            != derived([SYSTEM, greeting, FIRST, {**ANSWER, "content": "In build.sh."}]))


def test_the_same_opening_derives_one_session_whatever_follows_the_first_answer():
    """Unit test, no engine: later messages, answers, tool calls and the tools offered
    change nothing once the first answer is in."""
    call = {"id": "c1", "type": "function",
            "function": {"name": "read_file", "arguments": '{"path": "Makefile"}'}}
    first_answer = {"role": "assistant", "content": None, "tool_calls": [call]}
    base = derived([SYSTEM, FIRST, first_answer])
    later = [SYSTEM, FIRST, first_answer,
             {"role": "tool", "tool_call_id": "c1", "content": "build: ..."},
             {"role": "assistant", "content": "It is the Makefile."},
             {"role": "user", "content": "And the tests?"}]
    assert derived(later) == base
    assert derived(later, tools=TOOLS) == base
    # arguments as a JSON string or another spacing are one call
    spaced = {**call, "function": {**call["function"], "arguments": '{ "path":"Makefile" }'}}
    assert derived([SYSTEM, FIRST, {**first_answer, "tool_calls": [spaced]}]) == base
    # The developer role is the system prompt under another name.
    assert derived([{**SYSTEM, "role": "developer"}, FIRST, first_answer]) == base


def test_a_first_turn_is_recorded_under_the_session_its_second_turn_derives():
    """Unit test, no engine: the record of a first turn is filed where the second turn
    looks (the session its answer names); a named session is never renamed."""
    from conductor.ledger.records import VisibleMessage
    from conductor.memory.context import MemoryContext, derive_session, session_after_answer
    from server.http.schema import ChatCompletionRequest
    from server.turn.memory import request_messages

    first = derived([SYSTEM, FIRST])
    memory = MemoryContext(user="tester", session=first, project=None, mode="on",
                           header=None, has_user_message=True, derived=True)
    turn = request_messages(ChatCompletionRequest.model_validate(
        {"model": "tiny", "messages": [SYSTEM, FIRST]}))
    answer = VisibleMessage.of("assistant", ANSWER["content"])
    assert session_after_answer(memory, [*turn, answer]) == derived([SYSTEM, FIRST, ANSWER])
    assert derive_session("tester", None, turn) == first
    named = MemoryContext(user="tester", session="mine", project=None, mode="on",
                          header=None, has_user_message=True)
    assert session_after_answer(named, [*turn, answer]) == "mine"


def shared_span(app: InProcessApp, session: str):
    record = app.memory.latest_record("tester", session)
    (span,) = [s for s in record.spans if s.kind == "shared"]
    return span, record


# These tests are about the index in the shared context (what a write changes and the
# prewarm refreshes): their apps show one, as the GPU profiles do.
@pytest.fixture
def app(template_served, tmp_path) -> InProcessApp:
    """Each test that takes it runs once a chat template."""
    return InProcessApp(template_served, tmp_path, memory_changes=WITH_INDEX)


@pytest.fixture
def embedded_app(served, tmp_path) -> InProcessApp:
    return InProcessApp(served, tmp_path, memory_changes=WITH_INDEX)


def add_note(app: InProcessApp, title: str, body: str):
    result = app.memory.store("tester").add(title=title, body=body, kind="reference",
                                            scope="user", source="cli", has_user_message=True)
    assert result.ok, result.reason
    return result.note


def fill(app: InProcessApp, count: int = 30) -> None:
    for n in range(count):
        add_note(app, f"service fact {n}", f"component {n} of the service listens on port {n}")


def first_turn(app: InProcessApp, system: str, session: str, question: str,
               script: str = "Noted.", **body):
    messages = [{"role": "system", "content": system}, {"role": "user", "content": question}]
    _, usage, _ = app.chat(messages, script, headers={"X-Tandem-Session": session}, **body)
    return usage


def test_a_second_session_with_the_same_system_prompt_is_served_the_shared_context_from_cache(
        app, tiny_profile):
    fill(app)
    system = f"You help with the service. [{uuid.uuid4().hex}]"
    first = first_turn(app, system, "share-a", "What listens where?", tools=TOOLS)
    a, record_a = shared_span(app, "share-a")
    assert first["prompt_tokens_details"]["cached_tokens"] < a.end - tiny_profile.block_size
    second = first_turn(app, system, "share-b", "Which ports are free today?", tools=TOOLS)
    b, record_b = shared_span(app, "share-b")
    assert record_b.ids[: b.end] == record_a.ids[: a.end]  # same ids: same cached blocks
    # every whole block of it cached (the last, partial one goes with the new message)
    whole_blocks = b.end - b.end % tiny_profile.block_size
    assert second["prompt_tokens_details"]["cached_tokens"] >= whole_blocks
    # The per-session part is elsewhere: each session's own token (a model with tools
    # could call the memory routes), after its user message.
    tokenizer = app.app.state.tandem.engine.tokenizer
    own = [s for s in record_b.spans if s.kind == "session"]
    assert own and own[0].start > b.end
    assert app.memory.token_for("tester", "share-b") in tokenizer.decode(
        list(record_b.ids[own[0].start:own[0].end]))


def version(app: InProcessApp) -> str:
    tandem = app.app.state.tandem
    return app.memory.shared_context("tester", None, True, True,
                                     tandem.engine.count_tokens).version


def test_without_an_index_a_write_leaves_the_shared_context_as_it_was(served, tmp_path):
    """The default shows no index: the card alone, the same before and after a write, so
    a new session finds it cached and there is nothing to prewarm."""
    plain = InProcessApp(served, tmp_path)
    fill(plain, 5)
    before = version(plain)
    add_note(plain, "the cache lives in redis", "sessions are cached in redis db 2")
    assert version(plain) == before
    assert served.run(plain.app.state.tandem.prewarm.tick()) == []


def test_a_write_changes_the_version_and_the_next_new_sessions_shared_context(app):
    fill(app, 5)
    system = f"System [{uuid.uuid4().hex}]"
    first_turn(app, system, "before-write", "What listens on port 3?")
    before, unchanged = version(app), version(app)
    assert before == unchanged  # reading, injecting and usage counts change nothing
    note = add_note(app, "the cache lives in redis", "sessions are cached in redis db 2")
    after = version(app)
    assert after != before
    first_turn(app, system, "after-write", "Where is the cache?")
    span, _ = shared_span(app, "after-write")
    old_span, _ = shared_span(app, "before-write")
    assert note.id in span.note_ids and note.id not in old_span.note_ids
    app.memory.store("tester").ratify(note.id, via="cli")
    assert version(app) != after  # a ratify shows in the index: a new version


def test_an_open_sessions_next_turn_after_a_write_is_still_fully_cached(app, tiny_profile):
    fill(app, 5)
    system = f"System [{uuid.uuid4().hex}]"
    messages = [{"role": "system", "content": system},
                {"role": "user", "content": "What listens on port 4?"}]
    session = {"X-Tandem-Session": "open-after-write"}
    content, first, _ = app.chat(messages, "Component 4.", headers=session)
    old, _ = shared_span(app, "open-after-write")
    add_note(app, "a new fact", "written while the session is open")
    messages += [{"role": "assistant", "content": content},
                 {"role": "user", "content": "Thanks, and port 2?"}]
    _, second, _ = app.chat(messages, "Component 2.", headers=session)
    floor = first["prompt_tokens"] + first["completion_tokens"] - tiny_profile.block_size
    assert second["prompt_tokens_details"]["cached_tokens"] >= floor
    assert shared_span(app, "open-after-write")[0] == old  # the index it was given stays


def shared_runs(runs: list) -> list[str]:
    """The outcomes of the runs that prefilled a head's shared context (the others are
    the likely notes' branches after it: tests/test_prewarm_branches.py)."""
    return [r.outcome for r in runs if r.kind == "shared"]


def test_after_a_write_the_prewarm_caches_the_new_shared_context_for_the_next_session(
        app, template_served, tiny_profile):
    served = template_served
    fill(app, 20)
    system = f"System [{uuid.uuid4().hex}]"
    first_turn(app, system, "warm-1", "What listens on port 7?")
    prewarm = app.app.state.tandem.prewarm
    assert shared_runs(served.run(prewarm.tick())) == []  # nothing changed: nothing to do
    add_note(app, "the queue is rabbitmq", "jobs go through rabbitmq on the broker host")
    runs = served.run(prewarm.tick())
    assert shared_runs(runs) == ["done"]
    # the index changed: every note's branch follows the new context, prefilled again
    assert len(runs) == 1 + 21 and {r.kind for r in runs[1:]} == {"note"}
    assert served.run(prewarm.tick()) == []  # warmed once, not again
    second = first_turn(app, system, "warm-2", "Which queue do the jobs use?")
    span, _ = shared_span(app, "warm-2")
    assert second["prompt_tokens_details"]["cached_tokens"] >= span.end - tiny_profile.block_size


def test_a_prewarm_never_starts_while_a_client_request_is_in_flight(embedded_app, served):
    app = embedded_app
    fill(app, 5)
    system = f"System [{uuid.uuid4().hex}]"
    first_turn(app, system, "busy-1", "What listens on port 1?")
    add_note(app, "a fact written now", "the prewarm is due after this write")
    prewarm = app.app.state.tandem.prewarm
    engine = app.app.state.tandem.engine
    long_answer = " ".join(["word"] * 150)

    async def scenario():
        client = asyncio.create_task(asyncio.to_thread(
            app.chat, [{"role": "user", "content": "talk"}], long_answer))
        while not engine.running("client"):
            await asyncio.sleep(0.005)
        during = await prewarm.tick()
        await client
        return during, client.result()

    during, (content, _, _) = served.run(scenario())
    assert during == [] and content == long_answer
    assert shared_runs(served.run(prewarm.tick())) == ["done"]


def test_a_client_request_beside_a_prewarm_gets_its_whole_answer(embedded_app, served):
    app = embedded_app
    fill(app, 30)
    system = f"System [{uuid.uuid4().hex}] " + "Long policy text. " * 200
    first_turn(app, system, "race-1", "What listens on port 9?")
    add_note(app, "another fact", "written so the prewarm has work")
    prewarm = app.app.state.tandem.prewarm
    engine = app.app.state.tandem.engine
    script = "The client's answer, whole and in order."

    async def scenario():
        warming = asyncio.create_task(prewarm.tick())
        while not engine.running("background"):
            await asyncio.sleep(0.001)
        content, _, _ = await asyncio.to_thread(
            app.chat, [{"role": "user", "content": "quick question"}], script)
        return content, await warming

    content, runs = served.run(scenario())
    assert content == script
    assert shared_runs(runs) in (["done"], ["preempted"])
    if shared_runs(runs) == ["preempted"]:  # ended at a step boundary: it stays due
        assert shared_runs(served.run(prewarm.tick())) == ["done"]


def test_a_dense_engine_makes_no_record_prefill_after_an_answer(served, tmp_path):
    """The record's idle-time prefill (server/idle/record_prefill.py) is a hybrid
    model's: a dense engine caches every block of the answer as it is read, so nothing is
    queued after a turn and the idle moment sends the engine nothing more. (Proxy mode's
    backend has no reuse_block either: the same switch, HttpEngine.reuse_block = None.)"""
    plain = InProcessApp(served, tmp_path)
    tandem = plain.app.state.tandem
    assert tandem.engine.reuse_block is None and not plain.memory.idle.records_due.on
    plain.chat([{"role": "user", "content": "What listens on port 5?"}], "Component 5.",
               headers={"X-Tandem-Session": "dense-record"})
    assert plain.memory.latest_record("tester", "dense-record") is not None  # recorded
    started = tandem.engine.stats.requests_started["background"]
    assert served.run(tandem.record_prefill.tick()) == []
    assert tandem.engine.stats.requests_started["background"] == started
    assert plain.memory.idle.records_due.take() is None
