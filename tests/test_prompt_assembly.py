"""The prompt's ids are the rendered conversation's ids: encoding its head once for every
request (memoised) and the rest apart joins exactly as encoding the whole."""

from __future__ import annotations

import pytest

from conductor.memory.hiding import SHARED_KIND
from conductor.memory.turn import Tail
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


def _counting_renders(tokenizer, monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Each render of the chat template from now on, by its add_generation_prompt."""
    renders: list[bool] = []
    real = tokenizer.apply_chat_template

    def counted(*args, **kwargs):
        renders.append(bool(kwargs.get("add_generation_prompt")))
        return real(*args, **kwargs)

    monkeypatch.setattr(tokenizer, "apply_chat_template", counted)
    return renders


def _two_renders(tokenizer, request: ChatCompletionRequest, thinking: bool) -> tuple[str, str]:
    """The conversation's history and generation prompt as two renders split them (the
    way render_chat found them before issue 58's item 4)."""
    messages = [{"role": m.role, "content": m.text()} for m in request.messages]
    rendered = [tokenizer.apply_chat_template(
        messages, tools=[t.model_dump(exclude_none=True) for t in request.tools or ()] or None,
        tokenize=False, add_generation_prompt=generation, enable_thinking=thinking)
        for generation in (False, True)]
    assert rendered[1].startswith(rendered[0])
    return rendered[0], rendered[1][len(rendered[0]):]


PLAIN = ["one user message", "system prompt", "tools and two system messages",
         "only a system message"]


@pytest.mark.parametrize("thinking", [False, True], ids=["thinking-off", "thinking-on"])
def test_a_request_renders_the_template_once_split_as_two_renders_split_it(
        template_tokenizer, monkeypatch, thinking):
    """Every template the profiles serve ends with its generation prompt, which reads
    enable_thinking alone: one render (with it) splits into the history and the
    generation prompt exactly where the two renders did (red before: two renders a
    request, the overhead bench's memory-on request rendered three times)."""
    tokenizer = template_tokenizer
    warm = ChatCompletionRequest(model="tiny", **CONVERSATIONS["one user message"])
    render_chat(tokenizer, warm, thinking)  # the generation prompt learned, once a template
    renders = _counting_renders(tokenizer, monkeypatch)
    for name in PLAIN:
        request = ChatCompletionRequest(model="tiny", **CONVERSATIONS[name])
        renders.clear()
        rendered = render_chat(tokenizer, request, thinking)
        assert renders == [True], name
        assert (rendered.history, rendered.generation_prompt) == _two_renders(
            tokenizer, request, thinking), name


@pytest.mark.parametrize("tail", [
    "{% if add_generation_prompt %}<|im_start|>assistant {{ messages | length }}\n{% endif %}",
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% else %}<|endoftext|>{% endif %}",
    "{% if not add_generation_prompt %}<|endoftext|>{% endif %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}",
], ids=["reads-the-messages", "has-an-else", "read-twice"])
def test_a_generation_prompt_that_may_depend_on_the_conversation_is_rendered_both_ways(
        tokenizer, monkeypatch, tail):
    """A template whose source does not show its generation prompt to be the same for
    every conversation is rendered with it and without it, as before, and split as the
    two renders say."""
    own = tokenizer.__class__.from_pretrained(tokenizer.name_or_path)
    own.chat_template = ("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}"
                         "<|im_end|>\n{% endfor %}" + tail)
    renders = _counting_renders(own, monkeypatch)
    for name in ("one user message", "system prompt"):
        request = ChatCompletionRequest(model="tiny", **CONVERSATIONS[name])
        renders.clear()
        rendered = render_chat(own, request, False)
        assert sorted(renders) == [False, True], name
        history, whole = (own.apply_chat_template(
            [{"role": m.role, "content": m.text()} for m in request.messages],
            tokenize=False, add_generation_prompt=generation) for generation in (False, True))
        if whole.startswith(history):  # split where the two renders part
            assert (rendered.history, rendered.generation_prompt) == (
                history, whole[len(history):])
        else:  # they never agreed: the whole render, nothing hidden in it (as before)
            assert (rendered.history, rendered.generation_prompt) == (whole, None)


def test_in_a_fresh_render_a_leading_note_goes_right_before_the_last_user_message(
        template_tokenizer):
    """A miss or the continuous conversation renders every earlier turn after the head:
    the matched note leads the message it matches, after those turns, so the ids up to
    that message are the ones a prefix prefill put in the cache (red before: the note
    went right after the shared context, before the first turn)."""
    tokenizer = template_tokenizer
    request = ChatCompletionRequest(model="tiny", messages=[
        {"role": "system", "content": "Shared head."},
        {"role": "user", "content": "where is the API?"},
        {"role": "assistant", "content": "On port 8080."},
        {"role": "user", "content": "and the staging host?"}])
    rendered = render_chat(tokenizer, request, enable_thinking=False)
    note = Tail("notes", "staging hostname: alpha.internal", ("n1",), leads=True)
    plain = assemble(tokenizer, rendered, None, SHARED, [])
    built = assemble(tokenizer, rendered, None, SHARED, [note])
    _, span = built.spans
    last_user = tokenizer.encode("<|im_start|>user\nand the staging host?",
                                 add_special_tokens=False)
    assert built.ids[span.end:span.end + len(last_user)] == last_user
    assert built.ids[:span.start] == plain.ids[:span.start]  # the turns before, as they were
    assert built.ids[span.start:span.end] == hidden_message_ids(tokenizer, note.text)
    assert built.ids[span.end:] == plain.ids[span.start:]
