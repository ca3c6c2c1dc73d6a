"""The served model's own special token ids, read from its tokenizer.

Qwen's ids are not everyone's: SmolLM2's `<|im_end|>` is 2, and it has no `<tool_call>`
token at all. The engine and the server take these from here, never from constants.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SpecialTokens:
    end_of_turn: int  # ends an answer: ChatML's <|im_end|>, else the tokenizer's eos
    tool_call: int | None  # opens a tool call (tool_call_format qwen), None: no such token
    tool_call_end: int | None
    tool_response: int | None
    think: int | None
    think_end: int | None


def _single_id(tokenizer, text: str) -> int | None:
    """The id of `text` when this vocabulary holds it as one token, else None."""
    ids = tokenizer.encode(text, add_special_tokens=False)
    return ids[0] if len(ids) == 1 else None


def special_tokens(tokenizer, tool_call_format: str) -> SpecialTokens:
    end = _single_id(tokenizer, "<|im_end|>")
    if end is None:
        end = tokenizer.eos_token_id
    if end is None:
        raise ValueError("the tokenizer has neither <|im_end|> nor an eos token")
    qwen = tool_call_format == "qwen"

    def tag(text: str) -> int | None:
        return _single_id(tokenizer, text) if qwen else None

    return SpecialTokens(end_of_turn=end, tool_call=tag("<tool_call>"),
                         tool_call_end=tag("</tool_call>"), tool_response=tag("<tool_response>"),
                         think=_single_id(tokenizer, "<think>"),
                         think_end=_single_id(tokenizer, "</think>"))
