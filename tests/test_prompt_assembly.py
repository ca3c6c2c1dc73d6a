"""The prompt's ids are the rendered conversation's ids: encoding its head once for every
request (memoised) and the rest apart joins exactly as encoding the whole."""

from __future__ import annotations

import pytest

from server.http.schema import ChatCompletionRequest
from server.turn.answering.engine_tools import DEFINITIONS
from server.turn.prompt import _head_ids, assemble, render_chat

TOOL = {"type": "function", "function": {"name": "get_weather", "description": "Weather.",
                                         "parameters": {"type": "object", "properties": {
                                             "city": {"type": "string"}}}}}

CONVERSATIONS = {
    "one user message": {"messages": [{"role": "user", "content": "hi there"}]},
    "system prompt": {"messages": [{"role": "system", "content": "Be brief.\n\n"},
                                   {"role": "user", "content": "\nhello"}]},
    "tools and two system messages": {
        "tools": [*DEFINITIONS, TOOL],
        "messages": [{"role": "system", "content": "You are a coder."},
                     {"role": "system", "content": "Use tools."},
                     {"role": "user", "content": "weather in Oslo?"}]},
    "a finished tool exchange": {
        "tools": [TOOL],
        "messages": [{"role": "user", "content": "weather?"},
                     {"role": "assistant", "content": "", "tool_calls": [
                         {"id": "c1", "type": "function",
                          "function": {"name": "get_weather", "arguments": '{"city":"Oslo"}'}}]},
                     {"role": "tool", "tool_call_id": "c1", "content": "rain"},
                     {"role": "user", "content": "thanks"}]},
    "only a system message": {"messages": [{"role": "system", "content": "alone"}]},
}


@pytest.mark.parametrize("name", list(CONVERSATIONS))
def test_assembled_ids_are_the_whole_prompt_encoded(template_tokenizer, name):
    tokenizer = template_tokenizer
    request = ChatCompletionRequest(model="tiny", **CONVERSATIONS[name])
    rendered = render_chat(tokenizer, request, enable_thinking=False)
    whole = tokenizer.encode(rendered.history + (rendered.generation_prompt or ""),
                             add_special_tokens=False)
    for _ in range(2):  # the second time the head comes from the memo
        assert assemble(tokenizer, rendered, None, None, []).ids == whole


def test_the_head_is_encoded_once_for_many_requests(tokenizer):
    _head_ids.cache_clear()
    for user in ("first", "second", "third"):
        request = ChatCompletionRequest(model="tiny", tools=[TOOL], messages=[
            {"role": "system", "content": "Shared head."}, {"role": "user", "content": user}])
        assemble(tokenizer, render_chat(tokenizer, request, enable_thinking=False), None,
                 None, [])
    info = _head_ids.cache_info()
    assert (info.misses, info.hits) == (1, 2)
