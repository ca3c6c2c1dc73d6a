"""The one framing of server-sent events (server/http/sse.py) and the one conversion of a
wire's tools (server/turn/dialects/tools.py): pure units of our own logic, no engine."""

from __future__ import annotations

import asyncio
import json

import pytest

from engine.backend import BackendFailed, EngineDead
from server.http.errors import APIError
from server.http.sse import DONE, frame, typed_events
from server.turn.dialects.tools import chat_tools
from server.turn.messages import blocks
from server.turn.responses import items


def test_an_event_is_framed_as_data_and_named_where_the_stream_names_it():
    assert frame({"a": "é"}) == 'data: {"a": "é"}\n\n'
    assert frame({"type": "ping"}, "ping") == 'event: ping\ndata: {"type": "ping"}\n\n'
    assert DONE == "data: [DONE]\n\n"


def _collect(stream) -> list[str]:
    async def run() -> list[str]:
        return [event async for event in stream]
    return asyncio.run(run())


def test_typed_events_number_their_events_and_end_a_dead_engine_with_an_error_event():
    async def events():
        yield {"type": "response.created"}
        raise EngineDead()

    framed = _collect(typed_events(events(), lambda error: {"type": "error",
                                                            "message": error.message},
                                   numbered=True))
    assert [f.split("\n")[0] for f in framed] == ["event: response.created", "event: error"]
    assert [json.loads(f.split("data: ")[1])["sequence_number"] for f in framed] == [0, 1]


def test_a_backend_that_fails_is_the_routes_error_before_the_first_event_an_event_after():
    def failing(after: int):
        async def events():
            for _ in range(after):
                yield {"type": "message_start"}
            raise BackendFailed("the backend's stream was cut")
        return typed_events(events(), APIError.anthropic_body)

    with pytest.raises(BackendFailed):  # the route answers it: a 502, as on the chat route
        _collect(failing(0))
    framed = _collect(failing(1))
    assert [f.split("\n")[0] for f in framed] == ["event: message_start", "event: error"]
    assert json.loads(framed[1].split("data: ")[1]) == {"type": "error", "error": {
        "type": "api_error", "message": "the backend failed: the backend's stream was cut"}}

def test_both_wires_tools_become_the_chat_routes_with_hosted_ones_left_out():
    schema = {"type": "object"}
    assert chat_tools([{"name": "shell", "input_schema": schema, "description": "run"},
                       {"type": "web_search_20250305", "name": "web_search"}],
                      blocks.TOOLS) == [{"type": "function", "function": {
                          "name": "shell", "parameters": schema, "description": "run"}}]
    assert chat_tools([{"type": "web_search"},
                       {"type": "namespace", "tools": [
                           {"type": "function", "name": "read", "parameters": schema}]}],
                      items.TOOLS) == [{"type": "function", "function": {
                          "name": "read", "parameters": schema}}]
    assert chat_tools(None, items.TOOLS) is None
    with pytest.raises(APIError) as refused:
        chat_tools(["shell"], blocks.TOOLS)
    assert refused.value.param == "tools[0]"
    with pytest.raises(APIError) as refused:
        chat_tools([{"name": "shell"}], blocks.TOOLS)
    assert refused.value.param == "tools[0].input_schema"


def test_a_tool_inside_a_group_is_named_by_its_place_in_the_clients_list():
    tools = [{"type": "web_search"}, {"type": "function", "name": "a"},
             {"type": "namespace", "name": "repo", "tools": [
                 {"type": "function", "name": "b"}, {"type": "function"}]}]
    with pytest.raises(APIError) as refused:
        chat_tools(tools, items.TOOLS)
    assert refused.value.param == "tools[2].tools[1].name"
    assert refused.value.message.startswith("tools[2].tools[1].name: ")
    with pytest.raises(APIError) as refused:
        chat_tools([{"type": "namespace", "tools": ["b"]}], items.TOOLS)
    assert refused.value.param == "tools[0].tools[0]"


def test_tools_left_out_are_warned_of_once_and_only_when_there_are_some(caplog):
    schema = {"type": "object"}
    with caplog.at_level("WARNING", logger="tandem.server"):
        chat_tools([{"name": "shell", "input_schema": schema}], blocks.TOOLS)
        assert not caplog.records
        chat_tools([{"type": "web_search"}, {"type": "namespace", "tools": [
            {"type": "code_interpreter"}, {"type": "function", "name": "read"}]},
            {"type": "web_search"}], items.TOOLS)
    assert [r.getMessage() for r in caplog.records] == [
        "responses: tools this server cannot run left out: code_interpreter, web_search"]
