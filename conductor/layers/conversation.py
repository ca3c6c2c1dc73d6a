"""The continuous conversation's prompt, as text, from most stable to least stable.

1. the policy (code-owned: where each layer lives, what is in the prompt) and core memory,
   one system message; the chat template puts the tool catalog right after it;
2. working memory, a second system message;
3. the turns after the consolidation checkpoint, verbatim, in a bounded replay window;
4. the new user message, then its time metadata (local time, day, gap since the last
   message) as a hidden message: nothing that changes every message goes anywhere else.

The server splices the hidden memory context in as it does for chat (the shared context
after the system messages, matching notes after the new message) and replays the
ledger's exact ids, so message k+1 is served from the cache up to its new user message.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone

from conductor.layers.core import CoreFile
from conductor.layers.state import ConversationState
from conductor.layers.turn_format import Turn

POLICY = """\
You and the user share one continuous conversation: there is no new chat, and it picks up \
where it left off, days later too. Your memory has layers:
- Core memory, below: your role and protocol (AGENT.md), the user (USER.md), your voice \
and principles (SOUL.md). The user keeps these files; you never change them.
- Working memory, after this message: current priorities, active tasks, open threads, \
recent progress and pending checks, kept up to date between messages.
- The recent turns of the conversation, verbatim. Older turns are in the history layer.
- Semantic memory (facts, preferences, projects) and older history are not in this \
prompt: they are fetched on demand.
- Memory notes that match a message come as a system message after it.
Each user message is followed by a system line with the user's local time and the time \
since the previous message."""

TIME_KIND = "time"
CountTokens = Callable[[str], int]


@dataclass(frozen=True)
class WindowBounds:
    """The replay window's bounds: at most `turns` turns and `tokens` tokens."""

    turns: int
    tokens: int


def system_text(core: Sequence[CoreFile]) -> str:
    """The first system message: the policy, then each core file under its name."""
    parts = [POLICY, "", "# Core memory"]
    for file in core:
        parts += ["", f"## {file.name}", "", file.text.strip() or "(empty)"]
    return "\n".join(parts)


def working_memory_text(text: str) -> str:
    return text.strip() or "# Working memory\n\n(empty)"


def conversation_messages(core: Sequence[CoreFile], working_memory: str,
                          window: Sequence[Turn]) -> list[dict]:
    """The conversation up to (not including) a new message, as chat messages: the policy
    and core, working memory, then each replayed turn as the client would have sent it
    back (answers as shown, status lines included; tool calls with their exact
    arguments)."""
    out: list[dict] = [{"role": "system", "content": system_text(core)},
                       {"role": "system", "content": working_memory_text(working_memory)}]
    for turn in window:
        out += turn_messages(turn)
    return out


def turn_messages(turn: Turn) -> list[dict]:
    out: list[dict] = []
    for message in turn.messages:
        if message.role == "assistant":
            calls = [{"id": c.call_id, "type": "function",
                      "function": {"name": c.name, "arguments": c.arguments}}
                     for c in message.tool_calls()]
            out.append({"role": "assistant", "content": message.shown(),
                        **({"tool_calls": calls} if calls else {})})
        elif message.role == "tool":
            call_id = next((p.call_id for p in message.parts if p.call_id), None)
            out.append({"role": "tool", "content": message.text(), "tool_call_id": call_id})
        else:
            out.append({"role": "user", "content": message.text()})
    return out


def turn_tokens(turn: Turn, count: CountTokens) -> int:
    total = 0
    for message in turn.messages:
        total += count(message.shown() or message.text())
        total += sum(count(p.arguments or "") for p in message.tool_calls())
    return total


def replay_window(turns: Sequence[Turn], state: ConversationState, bounds: WindowBounds,
                  count: CountTokens) -> tuple[list[Turn], ConversationState]:
    """The turns the prompt replays, and the state with the window's start moved when the
    window outgrew a bound.

    The start moves with hysteresis: an outgrown window keeps only the newest half of
    each bound, so the prompt re-renders (and is prefilled from working memory on) once
    per half window, not on every message as a sliding window would make it."""
    kept = [t for t in turns if t.seq >= state.window_start]
    sizes = [turn_tokens(t, count) for t in kept]
    if len(kept) <= bounds.turns and sum(sizes) <= bounds.tokens:
        return kept, state
    while kept and (len(kept) > bounds.turns // 2 or sum(sizes) > bounds.tokens // 2):
        kept.pop(0)
        sizes.pop(0)
    start = kept[0].seq if kept else (turns[-1].seq + 1 if turns else state.window_start)
    return kept, ConversationState(state.checkpoint_seq, start)


def local_offset_minutes(moment: datetime | None = None) -> int:
    """This machine's UTC offset in minutes: a local server's clock is its user's."""
    offset = (moment or datetime.now(UTC)).astimezone().utcoffset() or timedelta(0)
    return int(offset.total_seconds() // 60)


def time_line(now: datetime, offset_minutes: int, previous: datetime | None) -> str:
    """The new message's time metadata, e.g. "Local time: Monday 30 November 2026, 11:15
    (UTC+01:00). 2 hours 5 minutes since the previous message." """
    local = now.astimezone(timezone(timedelta(minutes=offset_minutes)))
    sign = "+" if offset_minutes >= 0 else "-"
    hours, minutes = divmod(abs(offset_minutes), 60)
    when = (f"Local time: {local:%A} {local.day} {local:%B %Y, %H:%M} "
            f"(UTC{sign}{hours:02d}:{minutes:02d}).")
    if previous is None:
        return f"{when} The first message of the conversation."
    return f"{when} {_gap(now - previous)} since the previous message."


def _gap(gap: timedelta) -> str:
    seconds = max(0, int(gap.total_seconds()))
    if seconds < 60:
        return "Less than a minute"
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes = rest // 60
    units = [(days, "day"), (hours, "hour"), (minutes, "minute")]
    shown = [(n, u) for n, u in units if n][:2]
    return " ".join(f"{n} {u}{'s' if n != 1 else ''}" for n, u in shown).capitalize()
