"""The Responses API through the OpenAI SDK on the real engine, on each chat template the
profiles serve: a conversation chained by `previous_response_id` replays every earlier
turn's ids (the client sends only what is new), streamed events come in the API's order,
a tool loop runs by function call outputs, `text.format` constrains the answer through
the chat route's grammar, and memory's blocks are held back as in chat."""

from __future__ import annotations

import json

import openai
import pytest

WEATHER = {"type": "function", "name": "get_weather", "description": "The weather in a city",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                          "required": ["city"]}}
CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
REASONED = "<think>\nThe user greets me; I greet back.\n</think>\n\nHello to you."


@pytest.fixture
def client(template_served) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{template_served.base_url}/v1", api_key="unused",
                         max_retries=0)


def create(client: openai.OpenAI, script: str, **body) -> openai.types.responses.Response:
    """One scripted response; streamed ones are read to their final event."""
    if not body.get("stream"):
        return client.responses.create(model="tiny", extra_body={"script": script}, **body)
    final = None
    for event in client.responses.create(model="tiny", extra_body={"script": script}, **body):
        if event.type in ("response.completed", "response.incomplete"):
            final = event.response
    assert final is not None, "the stream ended with the response"
    return final


def cached(response) -> int:
    return response.usage.input_tokens_details.cached_tokens


def latest_record(served, answer: str):
    """The ledger's newest record whose answer is `answer` (the turn just run)."""
    ledger = served.app.state.tandem.memory
    user = served.app.state.tandem.memory.settings.user_name
    user = user.lower() if user else user
    found = [ledger.latest_record(user, session) for session in ledger.sessions_of(user)]
    return next(r for r in found if r is not None and r.messages[-1].content == answer)


def test_the_plainest_call_answers_with_one_message(client):
    """One string of input, no instructions, no script: the model's own words."""
    response = client.responses.create(model="tiny", input="Hello", max_output_tokens=12)
    assert response.id.startswith("resp_") and response.object == "response"
    assert response.status in ("completed", "incomplete")
    assert response.usage.output_tokens > 0 and response.usage.input_tokens > 0
    assert [item.type for item in response.output if item.type != "reasoning"] == ["message"]


def test_six_turns_by_previous_response_id_each_replay_the_last(client, template,
                                                                template_served):
    """Every turn k+1 finds turn k's input and output cached, to within a block: the
    ledger replays the recorded ids (the client never re-sends the history, so nothing
    can be rendered differently)."""
    turns = [("Hello", "Hello to you."), ("What is a kettle?", "A pot that boils water."),
             ("And a teapot?", "A pot that brews tea."),
             ("Which is older?", "The teapot, by centuries."),
             ("Why?", "Tea came before electric kettles."), ("Thanks", "You are welcome.")]
    done: list = []
    records: list = []
    for n, (question, script) in enumerate(turns):
        response = create(client, script, input=question, instructions="Answer briefly.",
                          previous_response_id=done[-1].id if done else None,
                          stream=n % 2 == 1)
        assert response.status == "completed" and response.output_text == script
        record = latest_record(template_served, script)
        if done:
            last = done[-1].usage
            assert cached(response) >= last.input_tokens + last.output_tokens - 32, (
                f"turn {n + 1} on {template} re-read the conversation")
            before = list(records[-1].ids)
            assert list(record.ids[: len(before)]) == before, (
                "the prompt opens with the last turn's exact ids")
        done.append(response)
        records.append(record)
    ids = [response.id for response in done]
    assert client.responses.retrieve(ids[-1]).previous_response_id == ids[-2]
    items = client.responses.input_items.list(ids[-1], order="asc", limit=100).data
    assert [item.type for item in items] == ["message"] * (2 * len(turns) - 1)
    assert [item.role for item in items[:3]] == ["user", "assistant", "user"]


def test_a_reasoned_answer_is_replayed_the_turn_after(client, template):
    """The reasoning item goes back as the answer's reasoning: the next turn replays it.
    (A template that drops an earlier answer's reasoning drops it the turn after that,
    as on the chat route: `server/turn/replay.py`.)"""
    first = create(client, REASONED, input="Hi there", reasoning={"effort": "high"})
    second = create(client, "Fine.", input="How are you?", previous_response_id=first.id)
    assert cached(second) >= first.usage.input_tokens + first.usage.output_tokens - 32, template


def test_the_reasoning_comes_back_as_a_reasoning_item(client, template):
    response = create(client, REASONED, input="Hi", reasoning={"effort": "high"})
    kinds = [item.type for item in response.output]
    assert kinds == ["reasoning", "message"], template
    assert "greet back" in response.output[0].content[0].text
    assert response.usage.output_tokens_details.reasoning_tokens > 0


def test_a_stream_sends_the_api_event_sequence_in_order(client):
    events = list(client.responses.create(model="tiny", input="Hi", stream=True,
                                          reasoning={"effort": "high"},
                                          extra_body={"script": REASONED}))
    kinds = [event.type for event in events]
    reasoning_deltas = kinds.count("response.reasoning_text.delta")
    text_deltas = kinds.count("response.output_text.delta")
    assert reasoning_deltas > 0 and text_deltas > 0
    assert kinds == [
        "response.created", "response.in_progress",
        "response.output_item.added", "response.content_part.added",
        *["response.reasoning_text.delta"] * reasoning_deltas,
        "response.reasoning_text.done", "response.content_part.done",
        "response.output_item.done",
        "response.output_item.added", "response.content_part.added",
        *["response.output_text.delta"] * text_deltas,
        "response.output_text.done", "response.content_part.done",
        "response.output_item.done", "response.completed"]
    assert [event.sequence_number for event in events] == list(range(len(events)))
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    final = events[-1].response
    assert text == final.output_text == "Hello to you."
    assert client.responses.retrieve(final.id).output_text == text, "stored as streamed"


def test_the_sdk_stream_helper_assembles_the_same_response(client):
    with client.responses.stream(model="tiny", input="Hi", tools=[WEATHER],
                                 extra_body={"script": "Checking.\n" + CALL}) as stream:
        final = stream.get_final_response()
    assert [item.type for item in final.output] == ["message", "function_call"]
    assert final.output[1].name == "get_weather"


@pytest.mark.parametrize("stream", [False, True])
def test_a_tool_loop_runs_by_function_call_outputs(client, stream):
    asked = create(client, "Let me look that up.\n" + CALL, input="Weather in Paris?",
                   tools=[WEATHER], stream=stream)
    assert [item.type for item in asked.output] == ["message", "function_call"]
    (call,) = [item for item in asked.output if item.type == "function_call"]
    assert call.name == "get_weather" and json.loads(call.arguments) == {"city": "Paris"}
    assert call.call_id and call.status == "completed"
    answered = create(client, "Sunny in Paris.", previous_response_id=asked.id, stream=stream,
                      tools=[WEATHER], input=[{"type": "function_call_output",
                                               "call_id": call.call_id, "output": "sunny"}])
    assert answered.output_text == "Sunny in Paris."
    assert cached(answered) >= asked.usage.input_tokens + asked.usage.output_tokens - 32
    items = client.responses.input_items.list(answered.id, order="asc").data
    assert [item.type for item in items] == ["message", "message", "function_call",
                                             "function_call_output"]


def test_a_client_that_sends_the_whole_history_needs_no_store(client):
    """store: false and every item sent back, as a stateless client does (Codex with
    store off): the function call and its output are the chat route's messages."""
    asked = create(client, CALL, input="Weather in Paris?", tools=[WEATHER], store=False)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(asked.id)
    history = [{"role": "user", "content": "Weather in Paris?"},
               *[item.model_dump(exclude_none=True) for item in asked.output],
               {"type": "function_call_output", "call_id": asked.output[-1].call_id,
                "output": "sunny"}]
    answered = create(client, "Sunny.", input=history, tools=[WEATHER], store=False)
    assert answered.output_text == "Sunny."
    assert cached(answered) >= asked.usage.input_tokens + asked.usage.output_tokens - 32


@pytest.mark.parametrize("stream", [False, True])
def test_a_json_schema_format_is_the_answer_s_grammar(client, stream):
    schema = {"type": "object", "properties": {"city": {"type": "string"}},
              "required": ["city"], "additionalProperties": False}
    response = create(client, '{"city":"Paris"}', input="Name a city as JSON.", stream=stream,
                      text={"format": {"type": "json_schema", "name": "city",
                                       "schema": schema, "strict": True}})
    assert json.loads(response.output_text) == {"city": "Paris"}
    assert response.text.format.type == "json_schema"


def test_a_memory_block_is_held_back_with_its_status_line(client):
    block = ('<tandem_memory op="add" scope="user" kind="reference">\ntitle: kettle brand\n\n'
             'The kettle is a Bosch TWK.\n</tandem_memory>')
    response = create(client, f"Noted. {block}", input="My kettle is a Bosch TWK.")
    assert "tandem_memory" not in response.output_text
    assert response.output_text.startswith("Noted.")
    assert "remembered: kettle brand" in response.output_text
    follow = create(client, "A Bosch.", input="Which kettle?", previous_response_id=response.id)
    assert cached(follow) >= response.usage.input_tokens + response.usage.output_tokens - 32


def test_an_answer_with_an_engine_tool_between_reasoned_generations_replays(client,
                                                                            template):
    """Reasoning, a memory search's status line, more reasoning, the answer: four output
    items, one answer in the ledger; the next turn replays it."""
    search = '<tool_call>\n{"name": "memory_search", "arguments": {"query": "kettle"}}' \
        "\n</tool_call>"
    asked = create(client, [f"<think>\nLook it up.\n</think>\n\n{search}",
                            "<think>\nNothing found.\n</think>\n\nNo note on kettles."],
                   input="What kettle do I have?", reasoning={"effort": "high"})
    kinds = [item.type for item in asked.output]
    assert kinds.count("message") >= 1 and "searched memory" in asked.output_text, kinds
    follow = create(client, "Fine.", input="OK.", previous_response_id=asked.id)
    assert cached(follow) >= asked.usage.input_tokens + asked.usage.output_tokens - 32, (
        template, kinds)


def test_an_empty_answer_is_still_a_turn_to_go_on_from(client):
    empty = create(client, "", input="Say nothing.")
    assert empty.output_text == "" and empty.status == "completed"
    follow = create(client, "Now something.", input="Now say something.",
                    previous_response_id=empty.id)
    assert follow.output_text == "Now something."
    assert cached(follow) >= empty.usage.input_tokens + empty.usage.output_tokens - 32
