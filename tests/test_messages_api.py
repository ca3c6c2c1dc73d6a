"""Anthropic's Messages API on the real engine (scripted), through the `anthropic` SDK and
in Claude Code's exact request shape: content blocks in and out, a tool_use -> tool_result
round trip, thinking, streaming events in Anthropic's order, memory on as on chat (the
next turn replays the last, a memory block is held back and stored), count_tokens, and
errors in Anthropic's shape. The server has an API key, as Claude Code's would."""

from __future__ import annotations

import json
import secrets

import anthropic
import httpx
import pytest

from tests.served import AppOnLoop

KEY = "claude-code-key-for-tests"
USER = "claude"
READ = {"name": "Read", "description": "Reads a file from the local filesystem.",
        "input_schema": {"type": "object", "additionalProperties": False,
                         "$schema": "http://json-schema.org/draft-07/schema#",
                         "properties": {"file_path": {"type": "string"},
                                        "limit": {"type": "number"}},
                         "required": ["file_path"]},
        "cache_control": {"type": "ephemeral"}}
CALL = ('<tool_call>\n{"name": "Read", "arguments": {"file_path": "/repo/README.md"}}'
        "\n</tool_call>")
THOUGHT = "<think>\nThe user wants the README: I read it.\n</think>\n\n"
BLOCK = ('<tandem_memory op="add" scope="user" kind="reference">\ntitle: kettle brand\n\n'
         "The kettle is a Bosch TWK.\n</tandem_memory>")


@pytest.fixture(scope="module")
def server(served, tmp_path_factory):
    """A second app on the session's engine: a home of its own, and an API key."""
    from conductor.memory.settings import MemorySettings
    from server.access.auth import Auth
    from server.access.keys import KeyStore
    from server.app import create_app

    home = tmp_path_factory.mktemp("messages-home")
    engine = served.app.state.tandem.engine
    app = AppOnLoop(served, create_app(engine.profile, home, engine=engine,
                                       memory_settings=MemorySettings(user_name=USER),
                                       auth=Auth(api_key=KEY, keys=KeyStore(home))))
    app.start()
    yield app
    app.stop()


@pytest.fixture
def client(server) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=server.base_url, api_key=KEY, max_retries=0)


def prompt_of(usage) -> int:
    """The whole prompt: Anthropic's input_tokens leave out what the cache served."""
    return (usage.input_tokens + (usage.cache_read_input_tokens or 0)
            + (usage.cache_creation_input_tokens or 0))


def events_of(response: httpx.Response) -> list[tuple[str, dict]]:
    """A stream's (event name, data) pairs."""
    assert response.status_code == 200, response.text
    pairs = []
    for chunk in response.text.strip().split("\n\n"):
        name, data = chunk.split("\n", 1)
        pairs.append((name.removeprefix("event: "), json.loads(data.removeprefix("data: "))))
    assert all(name == data["type"] for name, data in pairs)
    return pairs


def written(events: list[tuple[str, dict]], field: str) -> str:
    """What a stream's deltas of `field` (text, thinking) wrote."""
    return "".join(data.get("delta", {}).get(field, "") for _, data in events)


def test_the_plainest_call_answers_with_one_text_block(client):
    """One user message, no script: the model's own words."""
    reply = client.messages.create(model="tiny", max_tokens=12,
                                   messages=[{"role": "user", "content": "Hello"}])
    assert reply.id.startswith("msg_") and reply.type == "message"
    assert reply.role == "assistant" and reply.model == "tiny"
    assert [block.type for block in reply.content] == ["text"]
    assert reply.stop_reason in ("end_turn", "max_tokens")
    assert reply.usage.output_tokens > 0 and prompt_of(reply.usage) > 0


@pytest.mark.parametrize("stream", [False, True])
def test_a_tool_use_round_trip_with_thinking_replays_the_turn(client, stream):
    """System blocks, tools with input_schema, thinking, cache_control everywhere: the
    scripted Qwen call comes back as a tool_use block; the assistant message sent back
    whole (its signed thinking too) with a tool_result is replayed from the ledger."""
    system = [{"type": "text", "text": "You are a coding agent."},
              {"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}]
    question = {"role": "user", "content": [
        {"type": "text", "text": f"What is in the README? ({stream})",
         "cache_control": {"type": "ephemeral"}}]}
    body = dict(model="tiny", max_tokens=2048, system=system, tools=[READ],
                thinking={"type": "enabled", "budget_tokens": 1024})

    def ask(messages, script):
        if not stream:
            return client.messages.create(messages=messages, extra_body={"script": script},
                                          **body)
        with client.messages.stream(messages=messages, extra_body={"script": script},
                                    **body) as events:
            return events.get_final_message()

    asked = ask([question], THOUGHT + "I will read it.\n" + CALL)
    assert [b.type for b in asked.content] == ["thinking", "text", "tool_use"]
    thinking, text, call = asked.content
    assert "wants the README" in thinking.thinking and thinking.signature
    assert text.text == "I will read it.\n"
    assert call.name == "Read" and call.input == {"file_path": "/repo/README.md"}
    assert asked.stop_reason == "tool_use" and asked.stop_sequence is None
    result = {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": call.id, "is_error": False,
         "content": [{"type": "text", "text": "# Tandem\nA server."}]}]}
    history = [question, {"role": "assistant",
                          "content": [b.model_dump() for b in asked.content]}, result]
    answered = ask(history, "It describes a server.")
    assert [b.type for b in answered.content] == ["text"]
    assert answered.content[0].text == "It describes a server."
    assert answered.stop_reason == "end_turn"
    assert answered.usage.cache_read_input_tokens >= (
        prompt_of(asked.usage) + asked.usage.output_tokens - 32), "the turn was replayed"


def test_a_stream_sends_anthropic_s_events_in_order(server, caplog):
    with caplog.at_level("WARNING", logger="tandem.server"):
        response = httpx.post(f"{server.base_url}/v1/messages", headers={"x-api-key": KEY},
                              timeout=120, json={
            "model": "tiny", "max_tokens": 2048, "stream": True, "tools": [READ],
            "thinking": {"type": "enabled", "budget_tokens": 1024},
            "messages": [{"role": "user", "content": "Read the README, streamed."}],
            "script": THOUGHT + "Reading.\n" + CALL})
    # every tool runs here: no warning of one left out
    assert not [r for r in caplog.records if "left out" in r.getMessage()]
    assert response.headers["content-type"].startswith("text/event-stream")
    assert response.headers["cache-control"] == "no-cache"
    events = events_of(response)
    kinds = [(name, data.get("delta", {}).get("type")) for name, data in events]
    thinking = kinds.count(("content_block_delta", "thinking_delta"))
    text = kinds.count(("content_block_delta", "text_delta"))
    assert thinking > 0 and text > 0
    assert kinds == [
        ("message_start", None), ("content_block_start", None), ("ping", None),
        *[("content_block_delta", "thinking_delta")] * thinking,
        ("content_block_delta", "signature_delta"), ("content_block_stop", None),
        ("content_block_start", None), *[("content_block_delta", "text_delta")] * text,
        ("content_block_stop", None),
        ("content_block_start", None), ("content_block_delta", "input_json_delta"),
        ("content_block_stop", None), ("message_delta", None), ("message_stop", None)]
    start = events[0][1]["message"]
    assert start["content"] == [] and start["stop_reason"] is None
    assert [e[1]["index"] for e in events if e[0] == "content_block_start"] == [0, 1, 2]
    tool = [e[1]["content_block"] for e in events if e[0] == "content_block_start"][2]
    assert tool["type"] == "tool_use" and tool["name"] == "Read" and tool["input"] == {}
    assert json.loads(events[-4][1]["delta"]["partial_json"]) == {
        "file_path": "/repo/README.md"}
    assert events[-2][1]["delta"] == {"stop_reason": "tool_use", "stop_sequence": None}
    usage = events[-2][1]["usage"]
    assert usage["output_tokens"] > 0 and usage["cache_creation_input_tokens"] == 0


def claude_code_body(messages: list[dict], script: str) -> dict:
    """Claude Code's request: its billing header (a new hash each request) and system
    prompt as blocks with cache_control, its tools, thinking, 32,000 max_tokens (more
    than this model's context), metadata.user_id, a field of a beta, a stream."""
    billing = ("x-anthropic-billing-header: cc_version=2.0.14.a1b; cc_entrypoint=cli; "
               f"cch={secrets.token_hex(4)};")
    return {"model": "tiny", "max_tokens": 32000, "stream": True, "temperature": 1,
            "system": [{"type": "text", "text": billing},
                       {"type": "text", "text": "You are Claude Code, Anthropic's CLI.",
                        "cache_control": {"type": "ephemeral"}}],
            "messages": messages, "tools": [READ],
            "thinking": {"type": "enabled", "budget_tokens": 31999},
            "metadata": {"user_id": "user_3f2a_account__session_9c1d"},
            "context_management": {"edits": []}, "script": script}


CLAUDE_CODE_HEADERS = {"anthropic-version": "2023-06-01", "x-app": "cli",
                       "anthropic-beta": "claude-code-20250219,interleaved-thinking-2025-05-14",
                       "user-agent": "claude-cli/2.0.14 (external, cli)"}


def test_claude_code_s_request_shape_runs_its_tool_loop_with_memory_on(server):
    """`?beta=true`, the key as x-api-key (ANTHROPIC_API_KEY) or a bearer
    (ANTHROPIC_AUTH_TOKEN): the second turn, sent whole with a new billing hash, finds
    at least 95% of the first turn's prompt in the prefix cache."""
    url = f"{server.base_url}/v1/messages?beta=true"

    def post(key_headers: dict, messages: list[dict], script: str) -> list[tuple[str, dict]]:
        return events_of(httpx.post(url, headers={**CLAUDE_CODE_HEADERS, **key_headers},
                                    json=claude_code_body(messages, script), timeout=120))

    question = {"role": "user", "content": [
        {"type": "text", "text": "<system-reminder>\nToday is Friday.\n</system-reminder>"},
        {"type": "text", "text": "What is in the README?",
         "cache_control": {"type": "ephemeral"}}]}
    first = post({"x-api-key": KEY}, [question], THOUGHT + CALL)
    blocks = [e[1]["content_block"] for e in first if e[0] == "content_block_start"]
    assert [b["type"] for b in blocks] == ["thinking", "tool_use"]
    assert first[-2][1]["delta"]["stop_reason"] == "tool_use"
    thinking = written(first, "thinking")
    signed = next(e[1]["delta"]["signature"] for e in first
                  if e[1].get("delta", {}).get("type") == "signature_delta")
    call = blocks[1]
    answer = {"role": "assistant", "content": [
        {"type": "thinking", "thinking": thinking, "signature": signed},
        {"type": "tool_use", "id": call["id"], "name": "Read",
         "input": {"file_path": "/repo/README.md"}}]}
    result = {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": call["id"], "content": "# Tandem",
         "cache_control": {"type": "ephemeral"}}]}
    second = post({"Authorization": f"Bearer {KEY}"}, [question, answer, result],
                  "A server.")
    assert written(second, "text") == "A server."
    before, after = first[-2][1]["usage"], second[-2][1]["usage"]
    whole = sum(before[k] for k in ("input_tokens", "cache_read_input_tokens",
                                    "cache_creation_input_tokens"))
    assert after["cache_read_input_tokens"] >= 0.95 * whole, (before, after)
    refused = httpx.post(url, headers={**CLAUDE_CODE_HEADERS, "x-api-key": "wrong"},
                         json=claude_code_body([question], "x"), timeout=60)
    assert refused.status_code == 401
    assert refused.json() == {"type": "error", "error": {
        "type": "authentication_error", "message": "invalid API key"}}


def test_a_memory_block_is_held_back_and_stored(client, server):
    reply = client.messages.create(
        model="tiny", max_tokens=256, extra_body={"script": f"Noted. {BLOCK}"},
        messages=[{"role": "user", "content": "My kettle is a Bosch TWK."}])
    (text,) = reply.content
    assert "tandem_memory" not in text.text and text.text.startswith("Noted.")
    assert text.text.rstrip().endswith("› remembered: kettle brand")
    store = server.app.state.tandem.memory.store(USER)
    assert "kettle brand" in [note.title for note in store.list()]


def test_count_tokens_is_the_prompt_the_message_reports(client, server):
    """Memory's hidden parts included: the prompt as the turn lays it out, and nothing a
    turn sets off (a "remember that" counted is not carried out)."""
    body = dict(model="tiny", tools=[READ], system="You count.",
                messages=[{"role": "user", "content": "How long is this prompt?"}])
    counted = client.messages.count_tokens(**body).input_tokens
    reply = client.messages.create(max_tokens=8, extra_body={"script": "Short."}, **body)
    assert counted == prompt_of(reply.usage) and counted > 0
    command = [{"role": "user", "content": "Remember that my locker code is 4417."}]
    assert client.messages.count_tokens(model="tiny", messages=command).input_tokens > 0
    notes = server.app.state.tandem.memory.store(USER).list()
    assert not any("4417" in note.body for note in notes)


def test_stop_sequences_max_tokens_and_a_named_tool(client):
    question = [{"role": "user", "content": "Say something."}]
    stopped = client.messages.create(model="tiny", max_tokens=64, messages=question,
                                     stop_sequences=["STOP"],
                                     extra_body={"script": "Hello world. STOP here."})
    assert stopped.content[0].text == "Hello world. "
    assert (stopped.stop_reason, stopped.stop_sequence) == ("stop_sequence", "STOP")
    cut = client.messages.create(model="tiny", max_tokens=2, messages=question,
                                 extra_body={"script": "one two three four five six"})
    assert cut.stop_reason == "max_tokens" and cut.usage.output_tokens == 2
    forced = client.messages.create(model="tiny", max_tokens=64, messages=question,
                                    tools=[READ], tool_choice={"type": "tool", "name": "Read"},
                                    extra_body={"script": '{"file_path":"a.md"}'})
    assert [(b.type, b.name, b.input) for b in forced.content] == [
        ("tool_use", "Read", {"file_path": "a.md"})]
    assert forced.stop_reason == "tool_use"


@pytest.mark.parametrize("body, status, kind, named", [
    ({"messages": [{"role": "user", "content": "hi"}]}, 400, "invalid_request_error",
     "max_tokens"),
    ({"max_tokens": 8, "messages": [{"role": "robot", "content": "hi"}]}, 400,
     "invalid_request_error", "messages[0].role"),
    ({"max_tokens": 8, "messages": [{"role": "user", "content": [
        {"type": "image", "source": {"type": "base64", "data": "AA=="}}]}]}, 400,
     "invalid_request_error", "messages[0].content[0].type"),
    ({"max_tokens": 2048, "thinking": {"type": "enabled", "budget_tokens": 10},
      "messages": [{"role": "user", "content": "hi"}]}, 400, "invalid_request_error",
     "thinking.budget_tokens"),
    ({"max_tokens": 8, "top_k": 10**30, "messages": [{"role": "user", "content": "hi"}]},
     400, "invalid_request_error", "top_k"),
    ({"max_tokens": 8, "stop_sequences": [""], "messages": [
        {"role": "user", "content": "hi"}]}, 400, "invalid_request_error", "stop_sequences"),
    ({"model": "claude-sonnet-4-5", "max_tokens": 8,
      "messages": [{"role": "user", "content": "hi"}]}, 404, "not_found_error", "model"),
    # a tool is named by its place in the client's list, a server tool left out before it
    ({"max_tokens": 8, "messages": [{"role": "user", "content": "hi"}], "tools": [
        {"type": "web_search_20250305", "name": "web_search"}, {"name": "Read"}]}, 400,
     "invalid_request_error", "tools[1].input_schema"),
])
def test_errors_come_in_anthropic_s_shape(server, body, status, kind, named):
    response = httpx.post(f"{server.base_url}/v1/messages", headers={"x-api-key": KEY},
                          json={"model": "tiny", **body}, timeout=60)
    assert response.status_code == status, response.text
    error = response.json()
    assert error["type"] == "error" and error["error"]["type"] == kind
    assert named in error["error"]["message"]


def test_the_sdk_raises_its_own_errors_and_other_paths_answer_in_shape(client, server):
    with pytest.raises(anthropic.NotFoundError) as missing:
        client.messages.create(model="claude-opus-4-1", max_tokens=8,
                               messages=[{"role": "user", "content": "hi"}])
    assert "model 'claude-opus-4-1' does not exist" in missing.value.message
    with pytest.raises(anthropic.AuthenticationError) as refused:
        anthropic.Anthropic(base_url=server.base_url, api_key="wrong",
                            max_retries=0).messages.count_tokens(
            model="tiny", messages=[{"role": "user", "content": "hi"}])
    assert refused.value.body["error"] == {"type": "authentication_error",
                                           "message": "invalid API key"}
    batches = httpx.get(f"{server.base_url}/v1/messages/batches",
                        headers={"x-api-key": KEY}, timeout=30)
    assert batches.status_code == 404 and batches.json()["error"]["type"] == "not_found_error"


def test_a_max_tokens_past_the_context_is_the_room_the_prompt_leaves(server):
    """Claude Code asks 32,000 of any model: as vLLM, the answer gets what fits (a
    backend in proxy mode refuses a max_tokens past its context)."""
    from server.turn.messages.schema import MessagesRequest
    from server.turn.messages.turn import prepare

    state = server.app.state.tandem
    request = MessagesRequest.model_validate(claude_code_body(
        [{"role": "user", "content": "How much room is left?"}], "Some."))
    prepared = prepare(state.engine, state.profile, state.memory, request, {}, "127.0.0.1",
                       USER)
    room = state.profile.max_model_len - len(prepared.prompt_ids)
    assert 0 < prepared.params.max_tokens == room < 32000
    small = MessagesRequest.model_validate({**request.model_dump(), "max_tokens": 5,
                                            "thinking": None})
    assert prepare(state.engine, state.profile, state.memory, small, {}, "127.0.0.1",
                   USER).params.max_tokens == 5


def test_a_system_message_after_the_user_s_is_rendered_where_it_stands(server):
    """Claude Code 2.1 sends its environment as a `system` message after the user's first
    one (a 400 before: "'user' or 'assistant'", and Claude Code stopped); it is a system
    turn in place, as vLLM's Messages route keeps it, its billing header left out."""
    body = {"model": "tiny", "max_tokens": 8, "script": "Fine.", "messages": [
        {"role": "user", "content": [{"type": "text", "text": "Where am I?"}]},
        {"role": "system", "content": [
            {"type": "text", "text": "x-anthropic-billing-header: cc_version=2.1; cch=1;"},
            {"type": "text", "text": "Primary working directory: /srv/app"}]}]}
    response = httpx.post(f"{server.base_url}/v1/messages?beta=true", json=body, timeout=60,
                          headers={"x-api-key": KEY, "X-Tandem-Session": "inline-system"})
    assert response.status_code == 200, response.text
    assert response.json()["content"] == [{"type": "text", "text": "Fine."}]
    memory = server.app.state.tandem.memory
    record = memory.latest_record(USER, "inline-system")
    text = server.app.state.tandem.engine.tokenizer.decode(list(record.ids))
    assert text.index("Where am I?") < text.index(
        "<|im_start|>system\nPrimary working directory: /srv/app<|im_end|>")
    assert "billing-header" not in text


def test_a_tool_search_s_tool_references_load_the_tools_they_name(server):
    """Claude Code defers an MCP server's tools and loads them with its ToolSearch, whose
    result is `tool_reference` blocks (a 400 before: "not a block this server takes", and
    Claude Code dropped tool search for the session); each is a line naming the tool, which
    the request's `tools` carries whole. A reference without a name is a 400 naming it."""
    remember = {"name": "mcp__tandem__memory_remember", "description": "Remember a fact.",
                "input_schema": {"type": "object", "properties": {
                    "title": {"type": "string"}}, "required": ["title"]}}
    search = {"name": "ToolSearch", "description": "Loads deferred tools.",
              "input_schema": {"type": "object", "properties": {
                  "query": {"type": "string"}}, "required": ["query"]}}

    def body(reference: dict) -> dict:
        return {"model": "tiny", "max_tokens": 8, "script": "Loaded.",
                "tools": [search, remember], "messages": [
                    {"role": "user", "content": "Keep the staging host."},
                    {"role": "assistant", "content": [
                        {"type": "tool_use", "id": "toolu_1", "name": "ToolSearch",
                         "input": {"query": "select:mcp__tandem__memory_remember"}}]},
                    {"role": "user", "content": [
                        {"type": "tool_result", "tool_use_id": "toolu_1",
                         "content": [reference]}]}]}

    response = httpx.post(
        f"{server.base_url}/v1/messages?beta=true", timeout=60, json=body(
            {"type": "tool_reference", "tool_name": "mcp__tandem__memory_remember"}),
        headers={"x-api-key": KEY, "X-Tandem-Session": "tool-reference"})
    assert response.status_code == 200, response.text
    assert response.json()["content"] == [{"type": "text", "text": "Loaded."}]
    record = server.app.state.tandem.memory.latest_record(USER, "tool-reference")
    text = server.app.state.tandem.engine.tokenizer.decode(list(record.ids))
    assert "Tool loaded: mcp__tandem__memory_remember" in text
    nameless = httpx.post(f"{server.base_url}/v1/messages", headers={"x-api-key": KEY},
                          json=body({"type": "tool_reference"}), timeout=60)
    assert nameless.status_code == 400, nameless.text
    assert "messages[2].content[0].content[0].tool_name" in nameless.json()["error"][
        "message"]
