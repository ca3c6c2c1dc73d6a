"""An engine tool's exchange as the chat template renders it: what follows a call's
closing tag when the server answers it inside the model's turn, and an answer that is only
calls; a template that cannot render them is refused when the server starts."""

from __future__ import annotations

import functools

from server.turn.prompt import IM_END_TEXT, call_arguments, data_ids, render_template

CALL_CLOSE_TEXT = "</tool_call>"
_RESPONSE_MARK = "\x00tandem-tool-response\x00"


class TemplateCannotExchange(ValueError):
    """The chat template cannot render a tool call and its response as a suffix of the
    answer: the engine's memory tools cannot run inside the model's turn."""


def tool_exchange_text(tokenizer, name: str, arguments: str, response: str,
                       enable_thinking: bool) -> str:
    """What follows a tool call's closing tag when the server answers it inside the turn:
    the end of the assistant's message, the tool message and the next assistant header,
    as the chat template renders them. The call itself is the model's own text (kept as
    it wrote it), so only what comes after its closing tag is taken from the template."""
    before, after = _exchange_parts(tokenizer, enable_thinking)
    return before + response + after


def tool_exchange_ids(tokenizer, response: str, enable_thinking: bool) -> list[int]:
    """tool_exchange_text's ids, the response encoded as data (see data_ids)."""
    before, after = _exchange_parts(tokenizer, enable_thinking)
    encode = functools.partial(tokenizer.encode, add_special_tokens=False)
    return [*encode(before), *data_ids(tokenizer, response), *encode(after)]


@functools.lru_cache(maxsize=8)
def _exchange_parts(tokenizer, enable_thinking: bool) -> tuple[str, str]:
    """The exchange around its response, from one render of a whole exchange (a template
    need not render the call the same way before and after a message follows it)."""
    call = {"id": "call_0", "type": "function", "function": {"name": "f", "arguments": {}}}
    exchange = [{"role": "user", "content": "."},
                {"role": "assistant", "content": "", "tool_calls": [call]},
                {"role": "tool", "content": _RESPONSE_MARK, "tool_call_id": "call_0"}]
    whole = render_template(tokenizer, exchange, None, enable_thinking, generation=True)
    mark = whole.find(_RESPONSE_MARK)
    close = whole.rfind(CALL_CLOSE_TEXT, 0, max(mark, 0))
    if mark < 0 or close < 0 or whole.count(_RESPONSE_MARK) != 1:
        raise TemplateCannotExchange(
            "the chat template does not render a tool call followed by its response")
    return whole[close + len(CALL_CLOSE_TEXT):mark], whole[mark + len(_RESPONSE_MARK):]


def check_tool_exchange(tokenizer) -> None:
    """TemplateCannotExchange when the template cannot hold an engine tool's exchange,
    with thinking on or off: the server says so when it starts, not mid-answer."""
    for thinking in (False, True):
        _exchange_parts(tokenizer, thinking)
        assistant_calls_text(tokenizer, [("f", "{}")], thinking)


def assistant_calls_text(tokenizer, calls: list[tuple[str, str]], enable_thinking: bool) -> str:
    """An answer that is only tool calls, as the chat template renders it after the
    generation prompt, up to and with its end-of-turn token."""
    asked = [{"role": "user", "content": "."}]
    answered = [*asked, {"role": "assistant", "content": "", "tool_calls": [
        {"id": f"call_{n}", "type": "function",
         "function": {"name": name, "arguments": call_arguments(args)}}
        for n, (name, args) in enumerate(calls)]}]
    prompt = render_template(tokenizer, asked, None, enable_thinking, generation=True)
    whole = render_template(tokenizer, answered, None, enable_thinking, generation=False)
    if not whole.startswith(prompt) or IM_END_TEXT not in whole[len(prompt):]:
        raise TemplateCannotExchange(
            "the chat template does not render an answer after its prompt")
    body = whole[len(prompt):]
    return body[: body.rindex(IM_END_TEXT) + len(IM_END_TEXT)]


_PROBE_TOOL = "tandem_probe_tool"


@functools.lru_cache(maxsize=8)
def template_shows_tools(tokenizer) -> bool:
    """Whether the chat template shows the model the request's tools: a render with one
    tool names it (SmolLM2's template, for one, renders each message's content and nothing
    else). A template that fails on a tool shows none."""
    tool = {"type": "function", "function": {
        "name": _PROBE_TOOL, "description": "a probe",
        "parameters": {"type": "object", "properties": {}}}}
    try:
        text = render_template(tokenizer, [{"role": "user", "content": "."}], [tool], False,
                               generation=True)
    except Exception:  # jinja's errors, and whatever a template raises of its own
        return False
    return _PROBE_TOOL in text
