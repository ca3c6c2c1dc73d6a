"""An answer's output items as the model writes them, and the stream events that show them.

The parsed answer (reasoning, the text the client is shown, tool calls) fills items
in the order it comes: a reasoning item, a message item with one output_text part, a
function_call item a call. Each item is opened (`response.output_item.added`,
`response.content_part.added`), grown by deltas and closed (`...done`) when the next kind
starts or the answer ends: the event sequence of OpenAI's API, as vLLM sends it. The
same builder serves a whole response, whose events are not sent.
"""

from __future__ import annotations

from typing import Any

from server.turn.answering.output_parser import ToolCall
from server.turn.dialects.stream import Event
from server.turn.responses.items import new_id


class OutputItems:
    """The items of one answer (the stream loop's `Emitter`:
    server/turn/dialects/stream.py); each call and `close` return the events of what
    changed."""

    def __init__(self) -> None:
        self.items: list[dict[str, Any]] = []
        self._open: dict[str, Any] | None = None  # the item deltas go to, if any
        self._text = ""  # the open item's text so far

    def on_reasoning(self, text: str) -> list[Event]:
        return self._grow("reasoning", text)

    def on_text(self, text: str) -> list[Event]:
        return self._grow("message", text)

    def close(self, status: str = "completed") -> list[Event]:
        """The open item done; `status`: "incomplete" for an answer cut by its length."""
        item, self._open = self._open, None
        if item is None:
            return []
        item["status"] = status
        index = len(self.items) - 1
        if item["type"] == "message":
            part = {"type": "output_text", "text": self._text, "annotations": [],
                    "logprobs": []}
            item["content"] = [part]
            done = [_at(item, index, "response.output_text.done", content_index=0,
                        text=self._text, logprobs=[])]
        else:
            part = {"type": "reasoning_text", "text": self._text}
            item["content"] = [part]
            done = [_at(item, index, "response.reasoning_text.done", content_index=0,
                        text=self._text)]
        return [*done,
                _at(item, index, "response.content_part.done", content_index=0, part=part),
                {"type": "response.output_item.done", "output_index": index, "item": item}]

    @property
    def text(self) -> str:
        """All the answer's text, as the SDK's `output_text` joins it."""
        return "".join(part["text"] for item in self.items if item["type"] == "message"
                       for part in item["content"])

    def _grow(self, kind: str, text: str) -> list[Event]:
        events: list[Event] = []
        if self._open is None or self._open["type"] != kind:
            events += self.close()
            events += self._add(kind)
        self._text += text
        index = len(self.items) - 1
        delta = ("response.output_text.delta" if kind == "message"
                 else "response.reasoning_text.delta")
        extra = {"logprobs": []} if kind == "message" else {}
        events.append(_at(self._open, index, delta, content_index=0, delta=text, **extra))
        return events

    def _add(self, kind: str) -> list[Event]:
        if kind == "message":
            item = {"type": "message", "id": new_id("msg"), "role": "assistant",
                    "status": "in_progress", "content": []}
            part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
        else:
            item = {"type": "reasoning", "id": new_id("rs"), "summary": [], "content": [],
                    "status": "in_progress"}
            part = {"type": "reasoning_text", "text": ""}
        self.items.append(item)
        self._open, self._text = item, ""
        index = len(self.items) - 1
        return [{"type": "response.output_item.added", "output_index": index,
                 "item": dict(item)},
                _at(item, index, "response.content_part.added", content_index=0, part=part)]

    def on_tool_call(self, call: ToolCall) -> list[Event]:
        """A parsed call comes whole: added, its arguments in one delta, done."""
        events = self.close()
        item = {"type": "function_call", "id": new_id("fc"), "call_id": call.id,
                "name": call.name, "arguments": "", "status": "in_progress"}
        self.items.append(item)
        index = len(self.items) - 1
        events += [{"type": "response.output_item.added", "output_index": index,
                    "item": dict(item)},
                   _at(item, index, "response.function_call_arguments.delta",
                       delta=call.arguments)]
        item.update(arguments=call.arguments, status="completed")
        return [*events,
                _at(item, index, "response.function_call_arguments.done",
                    arguments=call.arguments, name=call.name),
                {"type": "response.output_item.done", "output_index": index,
                 "item": dict(item)}]


def _at(item: dict[str, Any], index: int, kind: str, **fields: Any) -> Event:
    return {"type": kind, "item_id": item["id"], "output_index": index, **fields}
