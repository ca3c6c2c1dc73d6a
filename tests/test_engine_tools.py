"""The engine's memory tools in the model's own turn, on the real engine (scripted): the
server runs `memory_search` and `memory_read`, the answer goes on after the response as
one answer, and the prefix cache serves everything but the response. Each test runs once
a chat template (the embedded one, Qwen3's and Qwen2.5's as published)."""

from __future__ import annotations

import json

import openai
import pytest

from engine.qwen_tokens import TOOL_CALL, TOOL_CALL_END
from server.turn.answering.engine_tools import SEARCH_LIMIT
from tests.inprocess import InProcessApp, eventually

SESSION = {"X-Tandem-Session": "tools"}
READ_FILE = [{"type": "function", "function": {
    "name": "read_file", "description": "Read a file",
    "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}}]


def user(text: str) -> list[dict]:
    return [{"role": "user", "content": text}]


def call(name: str, **arguments) -> str:
    return f'<tool_call>\n{json.dumps({"name": name, "arguments": arguments})}\n</tool_call>'


@pytest.fixture
def app(template_served, tmp_path) -> InProcessApp:
    app = InProcessApp(template_served, tmp_path)
    store = app.memory.store("tester")
    result = store.add(title="build needs node 20", kind="gotcha", scope="user", source="cli",
                       body="The build fails on node 18: it needs node 20 (the lockfile v3).",
                       has_user_message=True)
    assert result.ok
    app.note = result.note
    layers = app.memory.layers("tester")
    layers.ensure()
    (layers.files.semantic_dir / "facts.md").write_text(
        "# Facts\n\n## Build\n\nCI runs on quayside-runner-7.\n\n"
        "## Family\n\nThe user's sister is called Maren.\n")
    app.app.state.tandem.search.index("tester").sync()  # the first search finds it built
    return app


def record_text(app: InProcessApp, session: str = "tools") -> str:
    record = app.memory.latest_record("tester", session)
    return app.app.state.tandem.engine.tokenizer.decode(list(record.ids))


def test_a_search_then_the_answer_is_one_answer_with_a_status_line(app):
    script = [call("memory_search", query="node version for the build"), "It needs node 20."]
    content, usage, response = app.chat(user("Which node does the build need?"), script,
                                        headers=SESSION)
    body = response.json()
    assert content == "› searched memory: node version for the build\nIt needs node 20."
    assert body["choices"][0]["finish_reason"] == "stop"
    assert "tool_calls" not in body["choices"][0]["message"]
    text = record_text(app)
    response_text = text.split("<tool_response>")[1].split("</tool_response>")[0]
    assert "build needs node 20" in response_text and "notes/" in response_text
    record = app.memory.latest_record("tester", "tools")
    (span,) = [s for s in record.spans if s.kind == "tool"]
    hidden = app.app.state.tandem.engine.tokenizer.decode(list(record.ids[span.start:span.end]))
    assert hidden.startswith("<tool_call>") and "</tool_response>" in hidden
    assert usage["completion_tokens"] < usage["prompt_tokens"]


def test_the_continuation_prefills_only_the_tool_response(app):
    engine = app.app.state.tandem.engine
    first = user("Hello there, a first question.")
    content, _, _ = app.chat(first, "Hello.", headers=SESSION)
    history = [*first, {"role": "assistant", "content": content}, *user("Which node?")]
    script = [call("memory_search", query="node"), "Node 20."]
    _, _, response = app.chat(history, script, headers=SESSION)
    continuation = engine.stats.recent[response.json()["id"] + "-1"]
    record = app.memory.latest_record("tester", "tools")
    (span,) = [s for s in record.spans if s.kind == "tool"]
    call_end = list(record.ids[span.start:span.end]).index(TOOL_CALL_END) + 1
    exchange = span.end - span.start - call_end  # the message's end, the response, a header
    prefilled = continuation.prompt_tokens - continuation.cached_tokens
    assert exchange <= prefilled <= exchange + engine.profile.block_size, (prefilled, exchange)


def test_a_streamed_search_sends_the_status_line_and_no_tool_calls(app):
    script = [call("memory_search", query="node"), "Node 20."]
    response = app.request("POST", "/v1/chat/completions", headers=SESSION, json={
        "model": "tiny", "messages": user("Which node?"), "script": script, "stream": True})
    events = [json.loads(line[6:]) for line in response.text.splitlines()
              if line.startswith("data: {")]
    deltas = [e["choices"][0]["delta"] for e in events if e["choices"]]
    assert "".join(d.get("content") or "" for d in deltas) == \
        "› searched memory: node\nNode 20."
    assert not any("tool_calls" in d for d in deltas)
    assert events[-1]["choices"][0]["finish_reason"] == "stop"


def test_read_a_note_by_id_and_a_layer_section_by_path(app):
    script = [call("memory_read", ref=app.note.id),
              call("memory_read", ref="semantic/facts.md#Build"), "Node 20 on runner 7."]
    content, _, _ = app.chat(user("Tell me about the build."), script, headers=SESSION)
    assert content == (f"› read memory: {app.note.id}\n› read memory: semantic/facts.md#Build\n"
                       "Node 20 on runner 7.")
    responses = record_text(app).split("<tool_response>")[1:]
    assert "# build needs node 20" in responses[0] and "lockfile v3" in responses[0]
    assert "quayside-runner-7" in responses[1] and "Maren" not in responses[1]


def test_an_unknown_ref_and_a_ref_outside_memory_get_an_error_response(app):
    script = [call("memory_read", ref="semantic/nothing.md"),
              call("memory_read", ref="semantic/../../../../etc/passwd"), "Not found."]
    content, _, response = app.chat(user("Read it."), script, headers=SESSION)
    assert response.status_code == 200 and content.endswith("Not found.")
    responses = record_text(app).split("<tool_response>")[1:]
    assert responses[0].lstrip().startswith("Error: no memory file 'semantic/nothing.md'")
    assert responses[1].lstrip().startswith("Error: no memory file")
    assert "root:" not in record_text(app)


def test_a_malformed_call_and_bad_arguments_get_an_error_the_model_reads(app):
    broken = '<tool_call>\n{"name": "memory_search", "arguments": {"query": }\n</tool_call>'
    script = [broken, call("memory_search", q="node"), "I could not search."]
    content, _, response = app.chat(user("Search."), script, headers=SESSION)
    assert response.status_code == 200
    assert content == ("› memory tool failed: memory_search\n"
                       "› memory tool failed: memory_search\nI could not search.")
    responses = record_text(app).split("<tool_response>")[1:]
    assert "Error: the call is not valid JSON" in responses[0]
    assert "Error: bad arguments" in responses[1] and "'query' is a required" in responses[1]


def test_a_search_answers_with_five_entries_and_an_extra_argument_is_ignored(app):
    store = app.memory.store("tester")
    for n in range(7):
        assert store.add(title=f"deploy step {n}", kind="runbook", scope="user", source="cli",
                         body=f"Deploy step {n}: run the deploy script on host {n}.",
                         has_user_message=True).ok
    app.app.state.tandem.search.index("tester").sync()
    script = [call("memory_search", query="deploy step", limit=50), "Seven steps."]
    content, _, _ = app.chat(user("How do we deploy?"), script, headers=SESSION)
    assert content == "› searched memory: deploy step\nSeven steps."
    response = record_text(app).split("<tool_response>")[1].split("</tool_response>")[0]
    assert f"{SEARCH_LIMIT} entries for 'deploy step':" in response
    assert f"\n{SEARCH_LIMIT}. " in response and f"\n{SEARCH_LIMIT + 1}. " not in response


def test_a_note_of_a_title_alone_is_found_and_shown_by_its_title(app):
    store = app.memory.store("tester")
    assert store.add(title="The boiler room key hangs behind the Ferrowind poster.",
                     kind="reference", scope="user", source="cli", body="",
                     has_user_message=True).ok
    app.app.state.tandem.search.index("tester").sync()
    script = [call("memory_search", query="Ferrowind"), "Behind the poster."]
    app.chat(user("Where is the boiler room key?"), script, headers=SESSION)
    response = record_text(app).split("<tool_response>")[1].split("</tool_response>")[0]
    first = response.split("\n1. ", 1)[1].split("\n2. ", 1)[0]  # the best hit, then its snippet
    assert "ferrowind" in first.split("\n")[0]
    assert first.split("\n")[1] == "   The boiler room key hangs behind the Ferrowind poster."


def test_a_client_tool_after_an_engine_tool_ends_the_turn_with_tool_calls(app):
    script = [call("memory_search", query="node"), call("read_file", path="package.json")]
    response = app.request("POST", "/v1/chat/completions", headers=SESSION, json={
        "model": "tiny", "messages": user("Check the node version."), "tools": READ_FILE,
        "script": script})
    choice = response.json()["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    (client_call,) = choice["message"]["tool_calls"]
    assert client_call["function"]["name"] == "read_file"
    assert choice["message"]["content"] == "› searched memory: node\n"


def test_the_fourth_engine_call_of_a_turn_is_banned(app):
    script = [call("memory_search", query=f"try {n}") for n in range(4)] + ["never reached"]
    content, _, response = app.chat(user("Search hard."), script, headers=SESSION)
    assert content.count("› searched memory:") == 3
    assert response.json()["choices"][0]["finish_reason"] == "stop"
    record = app.memory.latest_record("tester", "tools")
    first = min(s.start for s in record.spans if s.kind == "tool")
    answer_ids = list(record.ids[first:])  # the catalog's instructions hold the tag too
    assert answer_ids.count(TOOL_CALL) == 3, "the fourth <tool_call> token was sampled"


def test_the_next_turn_is_served_from_the_cache_and_status_lines_are_stripped(app):
    question = user("Which node does the build need?")
    content, _, _ = app.chat(question, [call("memory_search", query="node"), "Node 20."],
                             headers=SESSION)
    previous = app.memory.latest_record("tester", "tools").ids
    history = [*question, {"role": "assistant", "content": content}, *user("And npm?")]
    _, usage, _ = app.chat(history, "npm 10.", headers=SESSION)
    assert usage["prompt_tokens_details"]["cached_tokens"] >= len(previous) - 32
    # Another session (no record: rendered afresh) sees the answer without the status line.
    app.chat(history, "npm 10.", headers={"X-Tandem-Session": "fresh"})
    fresh = record_text(app, "fresh")
    assert "Node 20." in fresh and "› searched memory" not in fresh


def test_memory_off_offers_no_engine_tools(app):
    script = call("memory_search", query="node")
    content, _, _ = app.chat(user("Which node?"), script,
                             headers={**SESSION, "X-Tandem-Memory": "off"})
    assert content == script  # memory off: the text is the model's, nothing runs
    assert "memory_search" not in record_text(app).split("<|im_start|>user")[0]


def test_memory_read_header_offers_engine_tools(app):
    content, _, _ = app.chat(user("Which node?"), [call("memory_search", query="node"), "20."],
                             headers={**SESSION, "X-Tandem-Memory": "read"})
    assert content == "› searched memory: node\n20."


def test_a_client_tool_named_like_an_engine_tool_replaces_the_engine_tools(app):
    """Codex CLI sends Tandem's MCP tools under their bare names (memory_search,
    memory_read): the client's own are offered and the engine's left out, so the prompt
    names each tool once and the agent is not stopped (it was a 400)."""
    clash = [{"type": "function", "function": {"name": "memory_search", "parameters": {}}}]
    response = app.request("POST", "/v1/chat/completions", headers=SESSION, json={
        "model": "tiny", "messages": user("hi"), "tools": clash, "script": "Hi."})
    assert response.status_code == 200, response.text
    head = record_text(app).split("<|im_start|>user")[0]
    assert head.count('"memory_search"') == 1 and "memory_read" not in head


def test_the_plain_sdk_call_gets_one_answer_after_a_search(template_served):
    client = openai.OpenAI(base_url=f"{template_served.base_url}/v1", api_key="unused")
    answer = client.chat.completions.create(
        model="tiny", messages=user("Which node?"),
        extra_body={"script": [call("memory_search", query="node"), "Node 20."]})
    assert answer.choices[0].message.content == "› searched memory: node\nNode 20."
    assert answer.choices[0].finish_reason == "stop" and not answer.choices[0].message.tool_calls


def test_the_continuous_conversation_keeps_the_turn_cached_and_its_status_line(app, tmp_path):
    content, _, _ = app.converse("Which node?", [call("memory_search", query="node"), "20."])
    assert content == "› searched memory: node\n20."
    previous = app.memory.latest_record("tester", "continuous").ids
    _, usage, _ = app.converse("And npm?", "10.")
    assert usage["prompt_tokens_details"]["cached_tokens"] >= len(previous) - 32
    turns = tmp_path / "memory" / "layers" / "tester" / "history" / "turns"
    eventually(lambda: len(list(turns.rglob("*.json"))) == 2)
    first = json.loads(sorted(turns.rglob("*.json"))[0].read_text())
    parts = first["messages"][1]["parts"]
    assert [p["type"] for p in parts] == ["status", "text"]
    assert parts[0]["text"] == "› searched memory: node\n"
