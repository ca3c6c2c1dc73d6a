"""Splits a Qwen answer, as it streams, into reasoning, content and tool calls.

Qwen3 writes `<think>...</think>` first when thinking, and `<tool_call>{json}</tool_call>`
for each call. Text that may be the start of a tag is held back until it can be told apart,
so a client never sees half a tag.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
CALL_OPEN, CALL_CLOSE = "<tool_call>", "</tool_call>"


@dataclass
class ToolCall:
    name: str
    arguments: str  # JSON text, as the OpenAI API carries it
    id: str = field(default_factory=lambda: f"call_{uuid.uuid4().hex[:24]}")
    malformed: bool = False  # an engine tool's call whose body is not a call's JSON

    def as_openai(self, index: int | None = None) -> dict:
        call = {"id": self.id, "type": "function",
                "function": {"name": self.name, "arguments": self.arguments}}
        return call if index is None else {"index": index, **call}


@dataclass
class ParsedDelta:
    reasoning: str = ""
    content: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.reasoning or self.content or self.tool_calls)


def _partial_tag_suffix(text: str, tags: tuple[str, ...]) -> int:
    """Length of the longest suffix of text that is a proper prefix of one of the tags."""
    longest = 0
    for tag in tags:
        for size in range(min(len(tag) - 1, len(text)), 0, -1):
            if text.endswith(tag[:size]):
                longest = max(longest, size)
                break
    return longest


def parse_tool_call(body: str) -> ToolCall | None:
    """`{"name": ..., "arguments": {...}}` -> ToolCall; None when it is not one."""
    try:
        data = json.loads(body)
    except ValueError:
        return None
    if not isinstance(data, dict) or not isinstance(data.get("name"), str):
        return None
    arguments = data.get("arguments", {})
    text = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
    return ToolCall(name=data["name"], arguments=text)


@dataclass(frozen=True)
class HeldCall:
    """An engine tool's call, where it stands in the generation's text (char offsets)."""

    call: ToolCall
    start: int  # where its opening tag starts
    end: int  # right after its closing tag


def _engine_tool_named(body: str, engine_tools: frozenset[str]) -> str | None:
    """The engine tool a call body that is not valid JSON names, if any."""
    return next((name for name in sorted(engine_tools) if f'"{name}"' in body), None)


class OutputParser:
    """Feed text deltas in order; each feed returns what may be shown now.

    A call to one of `engine_tools` is not a client's call: the parser stops right after
    it and holds it (`held`) for the server to run; `next_generation` goes on after it."""

    def __init__(self, parse_tools: bool = True,
                 engine_tools: frozenset[str] = frozenset()) -> None:
        self._parse_tools = parse_tools
        self._engine_tools = engine_tools
        self._pending = ""
        self._state = "start"  # start -> (reasoning ->) content <-> call
        self._skip_space = False  # drop the newlines that follow <think> and </think>
        self._fed = 0  # chars fed in this generation
        self._call_start = 0
        self.tool_calls: list[ToolCall] = []  # the client's calls
        self.held: HeldCall | None = None

    def feed(self, text: str) -> ParsedDelta:
        out = ParsedDelta()
        if self.held is not None:  # the generation is over for the client
            return out
        self._pending += text
        self._fed += len(text)
        while self.held is None and self._step(out):
            pass
        return out

    def next_generation(self) -> None:
        """The engine continues the answer after the held call's response: a new
        generation, which may open with its own reasoning."""
        self.held = None
        self._pending, self._fed = "", 0
        self._state, self._skip_space = "start", False

    @property
    def held_text(self) -> str:
        """Text fed but not shown yet (a partial tag, or a call still open)."""
        return (CALL_OPEN + self._pending) if self._state == "call" else self._pending

    def finish(self) -> ParsedDelta:
        """End of the answer: whatever is still held goes out as what it is."""
        out = ParsedDelta()
        rest, self._pending = self._pending, ""
        if self.held is not None:
            pass  # what followed a held call is not shown
        elif self._state == "reasoning":
            out.reasoning += rest
        elif self._state == "call":
            out.content += CALL_OPEN + rest  # an unclosed call is plain text
        else:
            out.content += rest
        return out

    def _step(self, out: ParsedDelta) -> bool:
        """Consume what can be decided from the pending text; True to go round again."""
        text = self._pending
        if self._state == "start":
            stripped = text.lstrip()
            if stripped.startswith(THINK_OPEN):
                self._pending = stripped[len(THINK_OPEN):]
                self._state = "reasoning"
                self._skip_space = True
                return True
            if THINK_OPEN.startswith(stripped) and stripped:
                return False  # may still become <think>
            if not stripped:
                return False
            self._state = "content"
            return True
        if self._skip_space:
            self._pending = text = text.lstrip()
            if not text:
                return False
            self._skip_space = False
        if self._state == "reasoning":
            if self._until(THINK_CLOSE, out, "reasoning", next_state="content"):
                self._skip_space = True
                return True
            return False
        if self._state == "content":
            if not self._parse_tools:
                out.content += text
                self._pending = ""
                return False
            return self._until(CALL_OPEN, out, "content", next_state="call")
        # state == "call": wait for the whole call
        end = text.find(CALL_CLOSE)
        if end < 0:
            return False
        body, self._pending = text[:end], text[end + len(CALL_CLOSE):]
        call = parse_tool_call(body.strip())
        if call is None and (name := _engine_tool_named(body, self._engine_tools)):
            call = ToolCall(name=name, arguments=body.strip(), malformed=True)
        self._state = "content"
        if call is None:
            out.content += CALL_OPEN + body + CALL_CLOSE
        elif call.name in self._engine_tools:
            self.held = HeldCall(call, self._call_start, self._fed - len(self._pending))
            return False
        else:
            self.tool_calls.append(call)
            out.tool_calls.append(call)
            self._skip_space = True  # the newline between two calls is not content
        return True

    def _until(self, tag: str, out: ParsedDelta, into: str, next_state: str) -> bool:
        text = self._pending
        at = text.find(tag)
        if at >= 0:
            self._call_start = self._fed - len(text) + at  # used when the tag opens a call
            part = text[:at].rstrip() if into == "reasoning" else text[:at]
            setattr(out, into, getattr(out, into) + part)
            self._pending = text[at + len(tag):]
            self._state = next_state
            return True
        keep = _partial_tag_suffix(text, (tag,))
        if into == "reasoning":  # the newline before </think> is not reasoning: hold it
            shown = text[: len(text) - keep]
            keep += len(shown) - len(shown.rstrip())
        setattr(out, into, getattr(out, into) + text[: len(text) - keep])
        self._pending = text[len(text) - keep:]
        return False
