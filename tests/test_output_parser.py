"""The streaming answer splitter: reasoning, content and tool calls, whatever the split."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from server.turn.answering.output_parser import OutputParser

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


ENGINE_CALL = ('Let me look.\n<tool_call>\n{"name": "memory_search", "arguments": {"query": "x"}}'
               '\n</tool_call>\nafter')


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=len(ENGINE_CALL)), max_size=6))
def test_an_engine_tool_call_is_held_at_its_end_whatever_the_split(cuts):
    bounds = [0, *sorted(cuts), len(ENGINE_CALL)]
    parser = OutputParser(engine_tools=frozenset({"memory_search"}))
    content = ""
    for a, b in zip(bounds, bounds[1:], strict=False):
        content += parser.feed(ENGINE_CALL[a:b]).content
    content += parser.finish().content
    assert content == "Let me look.\n" and parser.tool_calls == []
    held = parser.held
    assert held is not None and held.call.name == "memory_search"
    assert ENGINE_CALL[held.start:held.end].startswith("<tool_call>")
    assert ENGINE_CALL[held.start:held.end].endswith("</tool_call>")


def test_a_malformed_engine_call_is_held_as_malformed_and_a_client_one_stays_text():
    parser = OutputParser(engine_tools=frozenset({"memory_read"}))
    parser.feed('<tool_call>\n{"name": "memory_read", "arguments": {]}\n</tool_call>')
    assert parser.held is not None and parser.held.call.malformed
    other = OutputParser(engine_tools=frozenset({"memory_read"}))
    out = other.feed('<tool_call>\n{"name": "read_file", "arguments": {]}\n</tool_call>')
    assert other.held is None and out.content.startswith("<tool_call>")


def test_after_a_held_call_the_next_generation_parses_afresh():
    parser = OutputParser(engine_tools=frozenset({"memory_search"}))
    parser.feed('<tool_call>\n{"name": "memory_search", "arguments": {"query": "x"}}\n</tool_call>')
    assert parser.feed("ignored").content == ""
    parser.next_generation()
    out = parser.feed("<think>\nhm\n</think>\n\nNode 20.")
    assert (out.reasoning, out.content, parser.held) == ("hm", "Node 20.", None)
