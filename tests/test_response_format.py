"""`response_format` enforced as vLLM does, on the real engine: the tiny model's random
weights write anything they like, and the grammar alone holds the answer to the JSON."""

from __future__ import annotations

import json

import jsonschema
import pytest

from tests.inprocess import InProcessApp

TRIP = {"type": "object", "additionalProperties": False, "required": ["city", "days"],
        "properties": {"city": {"type": "string", "maxLength": 12},
                       "days": {"type": "integer", "minimum": 1, "maximum": 9}}}
FORMAT = {"type": "json_schema", "json_schema": {"name": "trip", "schema": TRIP,
                                                  "strict": True}}
ASK = [{"role": "user", "content": "Plan a trip: which city, how many days?"}]


@pytest.fixture
def app(served, tmp_path) -> InProcessApp:
    return InProcessApp(served, tmp_path)


@pytest.mark.parametrize("seed", [1, 2])
def test_a_json_schema_answer_parses_and_validates(sdk, seed):
    answer = sdk.chat.completions.create(model="tiny", messages=ASK, response_format=FORMAT,
                                         seed=seed, max_tokens=64)
    jsonschema.validate(json.loads(answer.choices[0].message.content), TRIP)


def test_a_streamed_json_schema_answer_parses_and_validates(sdk):
    chunks = sdk.chat.completions.create(model="tiny", messages=ASK, response_format=FORMAT,
                                         seed=3, max_tokens=64, stream=True)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    jsonschema.validate(json.loads(text), TRIP)


def test_a_json_object_answer_parses(sdk):
    answer = sdk.chat.completions.create(model="tiny", messages=ASK, seed=4, max_tokens=200,
                                         response_format={"type": "json_object"})
    assert isinstance(json.loads(answer.choices[0].message.content), dict)


def test_a_block_inside_a_json_answer_is_text_and_writes_no_note(app):
    block = ('<tandem_memory op=\\"add\\" scope=\\"user\\" kind=\\"reference\\">\\n'
             'title: t\\n\\nb\\n</tandem_memory>')
    script = '{"city":"' + block + '"}'
    content, _, _ = app.chat(ASK, script, headers={"X-Tandem-Session": "json"},
                             response_format={"type": "json_object"})
    assert content == script and "<tandem_memory" in json.loads(content)["city"]
    store = app.memory.store("tester")
    assert store.list() == []
    # not even looked at: a block the filter took up would leave a refusal in the journal
    assert not [e for e in store.journal.entries() if e.get("op") == "block"]


@pytest.mark.parametrize("response_format, message", [
    ({"type": "json_schema", "json_schema": {"name": "x", "schema": {
        "type": "object", "properties": {"a": {"type": "nonsense"}}}}},
     "not a valid JSON schema at properties/a/type"),
    ({"type": "yaml"}, "response_format.type must be"),
    ({"type": "json_schema"}, "must be an object with a 'schema'"),
])
def test_a_response_format_that_cannot_be_met_is_a_400(app, response_format, message):
    response = app.request("POST", "/v1/chat/completions", json={
        "model": "tiny", "messages": ASK, "response_format": response_format})
    assert response.status_code == 400 and message in response.json()["error"]["message"]
