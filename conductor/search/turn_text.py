"""A history turn as search indexes it and `memory_read` shows it: Markdown, one section a
speaker under a heading with the turn's number and the user's local time, and a line of
the other side's words for context.

    # Turn 12, Tuesday 1 December 2026, 14:05
    ## user
    Where did I park?
    (answered: On level 3, row F.)
    ## assistant
    On level 3, row F.
    (in reply to: Where did I park?)

A question finds the turn that answers it whichever side holds its words ("what did you
tell me about parking" meets the answer through the user's line, and the reverse), and
the heading carries the time for "when did ..." questions. The turn's file is the truth;
this text is made from it on each read.
"""

from __future__ import annotations

import json
import re
from datetime import timedelta

from conductor.layers.turn_format import Turn, TurnFormatError, parse_turn

CONTEXT_CHARS = 160  # of the other side, in each section
_HEADING_START = re.compile(r"^(\s{0,3})#", re.MULTILINE)


def turn_markdown(raw: str) -> str:
    """The turn file's text as Markdown; "" for a file that is not a turn (the history
    sets such files aside; search has nothing to index in them)."""
    try:
        turn = parse_turn(json.loads(raw))
    except (ValueError, TurnFormatError):
        return ""
    return render_turn(turn)


def render_turn(turn: Turn) -> str:
    said = next((m.text() for m in turn.messages if m.role == "user"), "").strip()
    answered = next((m.text() for m in turn.messages if m.role == "assistant"), "").strip()
    local = turn.time + timedelta(minutes=turn.utc_offset_minutes)
    # the day and month in words: "what did I say in December" meets them
    lines = [f"# Turn {turn.seq}, {local:%A} {local.day} {local:%B %Y, %H:%M}"]
    if said:
        lines += ["## user", _escaped(said)]
        if answered:
            lines.append(f"(answered: {_clip(answered)})")
    if answered:
        lines += ["## assistant", _escaped(answered)]
        if said:
            lines.append(f"(in reply to: {_clip(said)})")
    return "\n".join(lines) + "\n"


def _escaped(text: str) -> str:
    """A line of the message that starts with '#' is text, not a heading of the turn."""
    return _HEADING_START.sub(lambda m: f"{m.group(1)}\\#", text)


def _clip(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= CONTEXT_CHARS else flat[: CONTEXT_CHARS - 1].rstrip() + "…"
