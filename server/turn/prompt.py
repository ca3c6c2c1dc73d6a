"""Builds a request's prompt token ids: the ledger's exact ids or the shared context, the
new messages, the tails.

The server hands vLLM token ids, never text, so what it builds is exactly what runs. When
the ledger holds the conversation so far, the prompt starts with those exact ids (hidden
blocks and earlier tail notes included) and only the new messages are rendered; the chat
template is still the judge of how they render, by rendering the whole conversation and
taking what follows the recorded part. When it does not (a new conversation, or a miss),
the prompt is rendered whole and the shared memory context goes in right after the system
prompt and the tool definitions, where every session with the same head shares it.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from conductor.memory.turn import Tail
from conductor.memory.types import Span, VisibleMessage, flat_ids
from server.http.errors import APIError
from server.http.schema import ChatCompletionRequest, ChatMessage
from server.turn.generation_prompt import generation_tail

AsWritten = Callable[[str], str]
IM_START_TEXT = "<|im_start|>"
IM_END_TEXT = "<|im_end|>"


def _text(message: ChatMessage) -> str:
    try:
        return message.text()
    except ValueError as exc:
        raise APIError(400, f"messages: {exc}", code="invalid_value", param="messages") from None


def _message_dict(message: ChatMessage, as_written: AsWritten) -> dict[str, Any]:
    content = _text(message)
    if message.role == "assistant":
        content = as_written(content)
    role = "system" if message.role == "developer" else message.role
    out: dict[str, Any] = {"role": role, "content": content}
    if message.tool_calls:
        out["tool_calls"] = [
            {"id": c.id, "type": "function",
             "function": {"name": c.function.name,
                          "arguments": call_arguments(c.function.arguments)}}
            for c in message.tool_calls
        ]
    if message.reasoning_content:
        out["reasoning_content"] = message.reasoning_content
    if message.tool_call_id:
        out["tool_call_id"] = message.tool_call_id
    return out


def tools_for_template(request: ChatCompletionRequest) -> list[dict[str, Any]] | None:
    """The tool definitions the model sees; none when tool_choice is "none"."""
    if not request.tools or request.tool_choice == "none":
        return None
    return [t.model_dump(exclude_none=True) for t in request.tools]


def visible_messages(request: ChatCompletionRequest) -> list[VisibleMessage]:
    """The conversation as the client holds it, in the ledger's terms: each answer as the
    client was shown it (status lines included, as the ledger recorded it).

    The tool definitions come first as a pseudo-message: a change of tools changes the
    system prompt, so a record made with other tools must not match.
    """
    tools = tools_for_template(request)
    out = [VisibleMessage.of("tools", None, [("tools", tools)])] if tools else []
    for message in request.messages:
        role = "system" if message.role == "developer" else message.role
        content = _text(message)
        calls = [(c.function.name, c.function.arguments) for c in message.tool_calls or ()]
        out.append(VisibleMessage.of(role, content, calls))
    return out


def data_ids(tokenizer, text: str) -> list[int]:
    """Ids of text that is data, not the prompt's structure: a note, an index line, a
    search result, a tool's response. The text of every added token in it stays text
    (`<|im_start|>`, and `</tool_response>` or `<think>`, which Qwen does not mark
    special), so no note, document or result can open a turn, close a tool response or
    start a think block of its own in every prompt it goes into."""
    if not text:
        return []
    encode = functools.partial(tokenizer.encode, add_special_tokens=False)
    ids: list[int] = []
    at = 0
    for found in _added_token_texts(tokenizer).finditer(text):
        token = found.group()
        # split after its first character: neither part is an added token
        ids += [*encode(text[at:found.start()]), *encode(token[:1]), *encode(token[1:])]
        at = found.end()
    return ids + (encode(text[at:]) if at < len(text) else [])


@functools.lru_cache(maxsize=8)
def _added_token_texts(tokenizer) -> re.Pattern[str]:
    """Every added token's text, longest first (one alternation, found in one pass)."""
    texts = sorted(tokenizer.get_added_vocab(), key=len, reverse=True)
    return re.compile("|".join(re.escape(t) for t in texts) or r"(?!)")


def hidden_message_ids(tokenizer, text: str) -> list[int]:
    """A hidden system message around `text`, which is data (see data_ids)."""
    return list(_hidden_message_ids(tokenizer, text))


@functools.lru_cache(maxsize=1024)
def _hidden_message_ids(tokenizer, text: str) -> tuple[int, ...]:
    """Memoised by text: a matched note's tail is the same text in every request that
    matches it until the note changes (a new text, a new entry), and encoding it was the
    note lane's largest piece of assembly under load (issue 58, item 2)."""
    return (*constant_ids(tokenizer, IM_START_TEXT + "system\n"), *data_ids(tokenizer, text),
            *constant_ids(tokenizer, IM_END_TEXT + "\n"))


def drop_text_memos() -> None:
    """Empty the memos keyed by text a user wrote or kept (a note's tail, a shared context
    with their index, a client's system prompt): a user's delete leaves none of it in this
    process. Every user's go; the next requests fill them again."""
    _hidden_message_ids.cache_clear()
    _shared_context_ids.cache_clear()
    _head_ids.cache_clear()


@functools.lru_cache(maxsize=64)
def constant_ids(tokenizer, text: str) -> tuple[int, ...]:
    """The ids of a piece of the template's structure that every request encodes alike (the
    generation prompt, a hidden message's opening and end), memoised per tokenizer and
    text: three of a memory-on request's five calls into the tokenizer were these (issue
    58, item 4). A template has a handful of such pieces; the bound holds a few models'."""
    return tuple(tokenizer.encode(text, add_special_tokens=False)) if text else ()


@dataclass(frozen=True)
class BuiltPrompt:
    ids: list[int]
    spans: list[Span]  # head and tail spans, in prompt-id offsets
    replayed_tokens: int  # ids taken from the ledger as they were


@dataclass(frozen=True)
class RenderedChat:
    """The client's conversation as the chat template renders it, split where we splice."""

    history: str  # every message, no generation prompt
    generation_prompt: str | None  # None: a template whose history is not a prefix
    messages: list[dict[str, Any]]  # as the template was given them
    tools: list[dict[str, Any]] | None
    enable_thinking: bool
    # Message contents that are data, not structure, and hold special-token text (the
    # continuous conversation's layer files): encoded as text where they stand.
    data: tuple[str, ...] = ()


def render_template(tokenizer, messages: list[dict[str, Any]], tools, enable_thinking: bool,
            generation: bool) -> str:
    return tokenizer.apply_chat_template(messages, tools=tools, tokenize=False,
                                         add_generation_prompt=generation,
                                         enable_thinking=enable_thinking)


def render_chat(tokenizer, request: ChatCompletionRequest, enable_thinking: bool,
                as_written: AsWritten = lambda text: text,
                data: Sequence[str] = ()) -> RenderedChat:
    """`as_written` takes the status lines the server added off an answer; `data`: message
    contents that are data (see RenderedChat.data)."""
    messages = [_message_dict(m, as_written) for m in request.messages]
    tools = tools_for_template(request)
    data = tuple(d for d in data if _holds_special_text(tokenizer, d))
    if request.continue_final_message or not request.add_generation_prompt:
        # The client ends the prompt (vLLM's add_generation_prompt: false, or the last
        # message left open): rendered as asked, nothing follows it.
        text = tokenizer.apply_chat_template(
            messages, tools=tools, tokenize=False, add_generation_prompt=False,
            continue_final_message=request.continue_final_message,
            enable_thinking=enable_thinking)
        return RenderedChat(text, "", messages, tools, enable_thinking, data)
    with_prompt = render_template(tokenizer, messages, tools, enable_thinking, generation=True)
    tail = generation_tail(tokenizer, enable_thinking)
    if tail is not None and with_prompt.endswith(tail):
        # the template's last act, the same for every conversation: one render splits
        return RenderedChat(with_prompt[:len(with_prompt) - len(tail)], tail, messages, tools,
                            enable_thinking, data)
    history = render_template(tokenizer, messages, tools, enable_thinking, generation=False)
    generation_prompt = with_prompt[len(history):] if with_prompt.startswith(history) else None
    if generation_prompt is None:
        history = with_prompt
    return RenderedChat(history, generation_prompt, messages, tools, enable_thinking, data)


@functools.lru_cache(maxsize=8)
def _special_texts(tokenizer) -> tuple[str, ...]:
    """The texts this tokenizer reads as one added token (`<|im_start|>`, `<think>`...)."""
    return tuple(tokenizer.get_added_vocab())


def _holds_special_text(tokenizer, text: str) -> bool:
    return any(special in text for special in _special_texts(tokenizer))


def encode_with_data(tokenizer, text: str, data: Sequence[str]) -> list[int]:
    """`text` encoded, each occurrence of a `data` string in it as data (data_ids)."""
    encode = functools.partial(tokenizer.encode, add_special_tokens=False)
    ids: list[int] = []
    at = 0
    while True:
        found = [(text.find(d, at), d) for d in data if d and text.find(d, at) >= 0]
        if not found:
            break
        start, piece = min(found)
        ids += [*(encode(text[at:start]) if start > at else []), *data_ids(tokenizer, piece)]
        at = start + len(piece)
    return ids + (encode(text[at:]) if at < len(text) else [])


def head_end(history: str) -> int:
    """Where the system prompt and tool definitions end: the start of the first message
    that is not a system message (0 when the conversation opens with one)."""
    at = history.find(IM_START_TEXT)
    while at >= 0:
        if not history.startswith("system\n", at + len(IM_START_TEXT)):
            return at
        at = history.find(IM_START_TEXT, at + 1)
    return len(history)


def shared_context_ids(tokenizer, text: str, start: int = 0,
                       block: int | None = None) -> list[int]:
    """The shared context as a hidden message, ending where its text ends. The prefix
    cache holds whole KV blocks only, so a new session prefills the context's last,
    partial block with its own first message (at most block_size - 1 tokens): padding it
    to a whole block with newline tokens, a run the tokenizer never produces, changed 28
    of 40 greedy replies on the quality bench (bench/README.md).

    `block` (the engine's `reuse_block`: a hybrid model in align mode) is the exception:
    there a prefix is reusable only up to a block boundary where vLLM kept the recurrent
    state, and a block is hundreds of tokens (640 on tiny-hybrid, 528 on Qwen3.5), so a
    context ending inside one loses that whole block every session. The message is padded
    inside, before its end, so that the prompt up to its end (`start` tokens before it)
    is a whole number of blocks: the checkpoint lands where the next session's prompt
    stops sharing it. What the padding costs: bench/results/hybrid-layout/summary.md."""
    ids = _shared_context_ids(tokenizer, text)
    if not block:
        return list(ids)
    pad = -(start + len(ids)) % block
    end = len(_end_ids(tokenizer))
    return [*ids[:-end], *[filler_id(tokenizer)] * pad, *ids[-end:]]


def _end_ids(tokenizer) -> tuple[int, ...]:
    return constant_ids(tokenizer, IM_END_TEXT + "\n")


@functools.lru_cache(maxsize=8)
def filler_id(tokenizer) -> int:
    """The padding token of a block-aligned shared context: one space, which says nothing
    (its effect on a real model's answers is not measured yet: the tiny models are random)."""
    return tokenizer.encode(" ", add_special_tokens=False)[0]


@functools.lru_cache(maxsize=32)
def _shared_context_ids(tokenizer, text: str) -> tuple[int, ...]:
    """Memoised: every new session encodes the same shared context, about 1,200 tokens."""
    return _hidden_message_ids(tokenizer, text)


@functools.lru_cache(maxsize=64)
def _head_ids(tokenizer, head: str) -> tuple[int, ...]:
    """The system prompt and tool catalog, encoded; memoised: a client sends the same head
    with every request (a coding agent's runs to thousands of tokens), and with memory on
    every head holds the engine's tool catalog (about 260 tokens). Encoding it again was a
    fifth of the server's time under many clients. Special tokens split the text before
    the tokenizer merges, so the head's ids and the rest's join as the whole's would."""
    return tuple(tokenizer.encode(head, add_special_tokens=False)) if head else ()


def assemble(tokenizer, rendered: RenderedChat, replay, head: Tail | None,
             tails: list[Tail], block: int | None = None) -> BuiltPrompt:
    """The prompt ids: the record's exact ids (`replay`, a server.turn.replay.Replay) or
    the head with the shared context after it (ending on a `block` boundary, when given:
    shared_context_ids), then the tails that lead (`Tail.leads`), the new messages, the
    other tails and the generation prompt."""

    def encode(text: str) -> list[int]:
        if rendered.data:
            return encode_with_data(tokenizer, text, rendered.data)
        return tokenizer.encode(text, add_special_tokens=False) if text else []

    history = rendered.history
    if rendered.generation_prompt is None:  # a template we cannot split: nothing hidden
        return BuiltPrompt(encode(history), [], 0)
    spans: list[Span] = []
    if replay is not None:
        ids, new_text = list(flat_ids(replay.ids)), history[replay.text_cut:]
    else:  # the client's system prompt and tools, encoded once (memoised)
        split = head_end(history)
        if head is None and split == len(history):
            split = 0  # no message after it: nothing to share, nothing to memoise
        head_text, new_text = history[:split], history[split:]
        ids = encode(head_text) if rendered.data else list(_head_ids(tokenizer, head_text))
        if head is not None:
            start = len(ids)
            ids += shared_context_ids(tokenizer, head.text, start, block)
            spans.append(Span(start, len(ids), head.kind, head.note_ids))
    replayed = len(ids) if replay is not None else 0
    leading = [tail for tail in tails if tail.leads]
    if leading and replay is None:
        # A fresh render holds every earlier turn after the head: the notes lead the last
        # user message (the one they match), after those turns, where a miss's or the
        # continuous conversation's prefix prefill stops (continuous.conversation_prefix_ids).
        at = max(new_text.rfind(IM_START_TEXT + "user"), 0)
        ids += encode(new_text[:at])
        new_text = new_text[at:]
    if leading and new_text.startswith(IM_END_TEXT):
        # A replayed answer that did not end cleanly (cut by its length): the render
        # closes it, and the notes that lead the message go after that, where the idle
        # time prefilled them (server/turn/replay.next_turn_replays), not inside it.
        ids += encode(IM_END_TEXT)
        new_text = new_text[len(IM_END_TEXT):]
    spans += [_append_hidden(tokenizer, ids, tail) for tail in leading]
    ids += encode(new_text)
    spans += [_append_hidden(tokenizer, ids, tail) for tail in tails if not tail.leads]
    # the generation prompt is the template's, never data: the same ids every request
    ids += encode(rendered.generation_prompt) if rendered.data \
        else constant_ids(tokenizer, rendered.generation_prompt)
    return BuiltPrompt(ids, spans, replayed)


def _append_hidden(tokenizer, ids: list[int], hidden: Tail) -> Span:
    start = len(ids)
    ids += hidden_message_ids(tokenizer, hidden.text)
    return Span(start, len(ids), hidden.kind, hidden.note_ids, hidden.versions)


def ids_for_text(tokenizer, ids: list[int], text: str) -> list[int]:
    """Ids for exactly `text`, the part of an answer the client was shown: the longest
    run of `ids` whose text is a prefix of it, then the rest of `text` encoded."""
    keep = len(ids)
    decoded = tokenizer.decode(ids, skip_special_tokens=True)
    while keep and not text.startswith(decoded):
        keep -= 1
        decoded = tokenizer.decode(ids[:keep], skip_special_tokens=True)
    rest = text[len(decoded):]
    return [*ids[:keep], *(tokenizer.encode(rest, add_special_tokens=False) if rest else [])]


def call_arguments(arguments: object) -> object:
    """Tool-call arguments as the chat template expects them: an object, as vLLM passes
    them (Qwen2.5's template applies `tojson` whatever it is given, so a JSON string would
    reach the model as a string inside JSON); text that is not JSON stays text."""
    if isinstance(arguments, str):
        try:
            return json.loads(arguments)
        except (ValueError, RecursionError):
            return arguments
    return arguments
