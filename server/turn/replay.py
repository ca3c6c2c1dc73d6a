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

from collections.abc import Sequence
from dataclasses import dataclass

from conductor.ledger.id_blocks import flat_ids
from conductor.ledger.records import Match, Span
from server.turn.prompt import IM_END_TEXT, IM_START_TEXT, RenderedChat, render_template


@dataclass(frozen=True)
class Replay:
    """The part of a record a prompt starts with, and where the fresh render takes over."""

    ids: Sequence[int]  # the record's ids kept
    spans: tuple[Span, ...]  # its hidden spans among them
    dropped: tuple[Span, ...]  # its hidden spans past the cut (an edit dropped them)
    text_cut: int  # where, in the whole history's render, the fresh part starts


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
    return Replay(record.ids[:at], kept, dropped, starts[opened])


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
