"""The streaming answer splitter: reasoning, content and tool calls, whatever the split."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from server.output_parser import OutputParser

ANSWER = ('<think>\nweigh it\n</think>\n\nHere <b>is</b> text.\n'
          '<tool_call>\n{"name": "get", "arguments": {"a": 1}}\n</tool_call>\n'
          '<tool_call>\n{"name": "put", "arguments": {"b": 2}}\n</tool_call>')


def run(pieces: list[str], parse_tools: bool = True) -> tuple[str, str, list]:
    parser = OutputParser(parse_tools=parse_tools)
    reasoning = content = ""
    calls = []
    for piece in [*pieces, None]:
        delta = parser.finish() if piece is None else parser.feed(piece)
        reasoning += delta.reasoning
        content += delta.content
        calls += delta.tool_calls
    return reasoning, content, calls


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=len(ANSWER)), max_size=8))
def test_any_split_gives_the_same_parts(cuts):
    bounds = [0, *sorted(cuts), len(ANSWER)]
    pieces = [ANSWER[a:b] for a, b in zip(bounds, bounds[1:], strict=False)]
    reasoning, content, calls = run(pieces)
    assert reasoning == "weigh it"  # no newline before </think>
    assert content == "Here <b>is</b> text.\n"  # and none between the two calls
    assert [(c.name, c.arguments) for c in calls] == [("get", '{"a": 1}'), ("put", '{"b": 2}')]


def test_a_call_that_is_not_json_stays_text():
    _, content, calls = run(["<tool_call>\nnot json\n</tool_call>"])
    assert calls == [] and content == "<tool_call>\nnot json\n</tool_call>"


def test_an_unclosed_call_goes_out_as_text_at_the_end():
    _, content, calls = run(['ok <tool_call>\n{"name": "x"'])
    assert calls == [] and content == 'ok <tool_call>\n{"name": "x"'


def test_without_tools_a_call_is_plain_text():
    text = '<tool_call>\n{"name": "x"}\n</tool_call>'
    assert run([text], parse_tools=False)[1] == text


def test_an_answer_that_only_looks_like_a_tag_is_content():
    assert run(["<thin", "g> is not a tag"])[1] == "<thing> is not a tag"
