"""The prompt's ids are the rendered conversation's ids: encoding its head once for every
request (memoised) and the rest apart joins exactly as encoding the whole."""

from __future__ import annotations

import pytest

from conductor.memory.hiding import SHARED_KIND, Tail
from server.http.schema import ChatCompletionRequest
from server.turn.answering.engine_tools import DEFINITIONS
from server.turn.prompt import (
    _end_ids,
    _head_ids,
    assemble,
    filler_id,
    hidden_message_ids,
    render_chat,
)

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


SHARED = Tail(SHARED_KIND, "the card\n\nthe index: port 8080 is the API")


def _with_shared(tokenizer, block: int | None):
    request = ChatCompletionRequest(model="tiny", tools=[TOOL], messages=[
        {"role": "system", "content": "Shared head."}, {"role": "user", "content": "hi"}])
    rendered = render_chat(tokenizer, request, enable_thinking=False)
    return rendered, assemble(tokenizer, rendered, None, SHARED, [], block)


def test_a_dense_layout_holds_the_shared_context_as_its_text_encodes(template_tokenizer):
    """No reuse block (every dense profile): the head, the hidden message as it always
    was, then the rest, byte for byte; no filler anywhere."""
    tokenizer = template_tokenizer
    rendered, built = _with_shared(tokenizer, None)
    (span,) = built.spans
    hidden = hidden_message_ids(tokenizer, SHARED.text)
    history = rendered.history
    head = tokenizer.encode(history[:history.find("<|im_start|>user")], add_special_tokens=False)
    rest = tokenizer.encode(history[len(tokenizer.decode(head)):]
                            + rendered.generation_prompt, add_special_tokens=False)
    assert built.ids == [*head, *hidden, *rest]
    assert (span.start, span.end) == (len(head), len(head) + len(hidden))


@pytest.mark.parametrize("block", [16, 640])
def test_a_reuse_block_pads_the_shared_context_to_end_on_a_boundary(template_tokenizer,
                                                                     block):
    """A hybrid model's layout: the same ids but for filler inside the hidden message,
    before its end, so that the head and the shared context end on a block boundary; what
    follows it is unchanged."""
    tokenizer = template_tokenizer
    _, dense = _with_shared(tokenizer, None)
    _, aligned = _with_shared(tokenizer, block)
    (plain,), (padded,) = dense.spans, aligned.spans
    end = len(_end_ids(tokenizer))
    assert padded.start == plain.start and padded.end % block == 0
    pad = padded.end - plain.end
    assert 0 <= pad < block
    assert aligned.ids[:plain.end - end] == dense.ids[:plain.end - end]
    assert set(aligned.ids[plain.end - end:padded.end - end]) <= {filler_id(tokenizer)}
    assert aligned.ids[padded.end - end:] == dense.ids[plain.end - end:]
