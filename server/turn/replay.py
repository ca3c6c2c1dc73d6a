"""Where a ledger record's exact ids stand in for the start of a new prompt.

The ledger (`conductor/ledger/records.py`) finds the record that shares the longest run
of leading messages with the client's conversation. When the record is all of that run
(the client added messages after it), its ids are kept whole. When the client changed a
message the record goes on past (an edit of message k, a regenerate further back, tools
answered in another order), the record's ids are kept up to where its message k starts,
with every hidden part before it (the shared context, held-back blocks, tail notes, tool
exchanges): only messages k.. are rendered afresh, so an edit costs their prefill only.

Both cuts are found by message boundaries, never by comparing renders: a template need not
render a prefix of the messages as a prefix of the whole (Qwen3's shows an answer's think
block only after the last user message). The kept messages alone, rendered, say how many
blocks (`<|im_start|>`) the template opens for them; the whole render's next block is the
first message rendered afresh, and in the record's ids it is the next `<|im_start|>` that
no hidden span holds.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass

from conductor.memory.hiding import SHARED_KIND
from conductor.memory.types import Match, Record, Span, flat_ids
from server.turn.prompt import IM_END_TEXT, IM_START_TEXT, RenderedChat, render_template


@dataclass(frozen=True)
class Replay:
    """The part of a record a prompt starts with, and where the fresh render takes over."""

    ids: Sequence[int]  # the record's ids kept
    spans: tuple[Span, ...]  # its hidden spans among them
    dropped: tuple[Span, ...]  # its hidden spans past the cut (an edit dropped them)
    text_cut: int  # where, in the whole history's render, the fresh part starts
    partial: bool = False  # the record goes on past the ids kept


def replay_of(tokenizer, rendered: RenderedChat, match: Match | None) -> Replay | None:
    """The record's ids that stand in for the first `match.matched_messages` messages, or
    None when they cannot (no match, a template we cannot split, a record whose blocks
    are not where the render puts them)."""
    if match is None or rendered.generation_prompt is None or match.matched_messages < 1:
        return None
    prefix = render_template(tokenizer, rendered.messages[: match.matched_messages],
                             rendered.tools, rendered.enable_thinking, generation=False)
    opened = prefix.count(IM_START_TEXT)
    history = rendered.history
    starts = _nth_occurrences(history, IM_START_TEXT, opened + 1)
    if opened == 0 or len(starts) <= opened:
        return None  # the template did not open the client's next message after them
    record = match.record
    if not match.partial:  # the whole record: it ends where its last message ends
        last, following = starts[opened - 1], starts[opened]
        end = history.rfind(IM_END_TEXT, last, following)
        if end < 0:
            return None
        cut = end + len(IM_END_TEXT) if record.ended_cleanly else end
        return Replay(record.ids, record.spans, (), cut)
    im_start = tokenizer.convert_tokens_to_ids(IM_START_TEXT)
    at = _visible_block_start(record.ids, record.spans, im_start, opened + 1)
    if at is None:
        return None
    kept = tuple(s for s in record.spans if s.end <= at)
    dropped = tuple(s for s in record.spans if s.end > at)
    if any(s.kind == SHARED_KIND for s in dropped):
        # a change among the system messages: the shared context goes after all of them,
        # so the prompt is rendered whole (the unchanged ids before it are cached anyway)
        return None
    return Replay(record.ids[:at], kept, dropped, starts[opened], partial=True)


THINK_TEXT, THINK_END_TEXT = "<think>", "</think>"
_THINK_BLOCK = re.compile(re.escape(THINK_TEXT) + r"(.*?)" + re.escape(THINK_END_TEXT), re.S)


def replay_without_stale_reasoning(tokenizer, rendered: RenderedChat,
                                   match: Match | None) -> Replay | None:
    """`replay_of`, but following the template's rule for earlier reasoning: where the
    template drops an answer's reasoning once a later user message follows it (Qwen3's
    does, and Qwen2.5's never shows any), an answer's reasoning is replayed once (the turn
    right after it, from the prefix cache) and then dropped: the next turn's prompt stops
    at that answer and renders it afresh, without it, with what follows. That re-prefill
    (the answer and the turn after it) is paid once; the prompt never carries reasoning a
    fresh render would not. An empty think block (thinking off) is no reasoning."""
    replay = replay_of(tokenizer, rendered, match)
    if replay is None or match is None or match.partial or not _drops_earlier_reasoning(
            tokenizer):
        return replay
    record = match.record
    flat = flat_ids(record.ids)
    if _think_ids(tokenizer) is not None and _reasoning_blocks(tokenizer, flat, 0,
                                                               len(flat)) < 2:
        return replay  # at most the last answer's own: replayed this once
    offset = match.matched_messages - len(record.messages)  # a tools pseudo-message: -1
    im_start = tokenizer.convert_tokens_to_ids(IM_START_TEXT)
    for index in _answers_followed_by_a_user(record.messages):
        earlier = replay_of(tokenizer, rendered, Match(record, index + offset, partial=True))
        if earlier is None:
            continue
        start = len(earlier.ids)
        following = _visible_block_start(flat[start + 1:], [], im_start, 1)
        end = len(flat) if following is None else start + 1 + following
        if _reasoning_blocks(tokenizer, flat, start, end):
            return earlier
    return replay


def next_turn_replays(tokenizer, record: Record) -> list[int] | None:
    """The ids a next turn that adds messages after `record` starts with, as `replay_of`
    and `replay_without_stale_reasoning` take them: the record whole, and the
    `<|im_end|>` the fresh render adds when its answer did not end cleanly. None where
    that turn renders the record's last answers afresh instead (a template that drops an
    earlier answer's reasoning, and reasoning replayed once already: the prompt stops at
    the earlier answer, which the turn before's own prompt put in the cache)."""
    flat = list(flat_ids(record.ids))
    if _drops_earlier_reasoning(tokenizer) and _reasoning_blocks(
            tokenizer, flat, 0, len(flat)) >= (2 if _think_ids(tokenizer) else 1):
        return None
    if not record.ended_cleanly:
        flat.append(tokenizer.convert_tokens_to_ids(IM_END_TEXT))
    return flat


def _answers_followed_by_a_user(messages) -> list[int]:
    """The record's answers that a user message follows, since the user message before
    the last one: their reasoning has been replayed once (earlier ones were dropped)."""
    users = [i for i, m in enumerate(messages) if m.role == "user"]
    if len(users) < 2:
        return []
    return [i for i in range(users[-2], users[-1]) if messages[i].role == "assistant"]


def _reasoning_blocks(tokenizer, ids: Sequence[int], start: int, end: int) -> int:
    """How many think blocks with reasoning in them `ids[start:end]` holds."""
    pair = _think_ids(tokenizer)
    if pair is None:  # a tokenizer without think tokens (Qwen2.5's): the text says
        text = tokenizer.decode(list(ids[start:end]))
        return sum(1 for found in _THINK_BLOCK.finditer(text) if found.group(1).strip())
    think, think_end = pair
    count, at = 0, start
    while True:
        try:
            opened = ids.index(think, at, end)
            closed = ids.index(think_end, opened, end)
        except ValueError:
            return count
        count += bool(tokenizer.decode(list(ids[opened + 1:closed])).strip())
        at = closed


@functools.lru_cache(maxsize=8)
def _think_ids(tokenizer) -> tuple[int, int] | None:
    """The ids of `<think>` and `</think>` when the tokenizer has each as one token."""
    pair = tokenizer.convert_tokens_to_ids([THINK_TEXT, THINK_END_TEXT])
    unknown = getattr(tokenizer, "unk_token_id", None)
    return None if any(i is None or i == unknown for i in pair) else tuple(pair)


@functools.lru_cache(maxsize=8)
def _drops_earlier_reasoning(tokenizer) -> bool:
    """Whether the chat template leaves an answer's reasoning out once a user message
    follows it (it is then never part of a fresh render)."""
    marker = "R3AS0N1NG-MARK"
    text = render_template(tokenizer, [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "a", "reasoning_content": marker},
        {"role": "user", "content": "q2"}], None, True, generation=True)
    return marker not in text


def _visible_block_start(ids: Sequence[int], spans: Sequence[Span], im_start: int,
                         nth: int) -> int | None:
    """Where the `nth` `<|im_start|>` outside every hidden span is in `ids`."""
    ids = flat_ids(ids)  # one flat copy to search, not one a block
    hidden = sorted((s.start, s.end) for s in spans)
    seen, at, index = 0, -1, 0
    while True:
        try:
            at = ids.index(im_start, at + 1)
        except ValueError:
            return None
        while index < len(hidden) and hidden[index][1] <= at:
            index += 1
        if index < len(hidden) and hidden[index][0] <= at:
            continue  # a hidden message's own block
        seen += 1
        if seen == nth:
            return at


def _nth_occurrences(text: str, needle: str, count: int) -> list[int]:
    """Where the first `count` occurrences of `needle` start."""
    found: list[int] = []
    at = text.find(needle)
    while at >= 0 and len(found) < count:
        found.append(at)
        at = text.find(needle, at + len(needle))
    return found
