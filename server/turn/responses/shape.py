"""The response object: what the request asked for, echoed, around the answer's items."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from server.http.responses_schema import ResponsesRequest

FINAL_STATUSES = ("completed", "incomplete", "failed", "cancelled")


@dataclass
class ResponseShape:
    """One response's fields but its output, status and usage (`object`)."""

    id: str
    model: str
    request: ResponsesRequest
    tools: list[dict[str, Any]] = field(default_factory=list)
    created_at: int = field(default_factory=lambda: int(time.time()))

    def __post_init__(self) -> None:
        # dumped once, where the shape is made (in a worker thread): a schema may be large
        request = self.request
        self._text_format = (request.text.format.model_dump(by_alias=True, exclude_none=True)
                             if request.text is not None and request.text.format is not None
                             else {"type": "text"})

    def object(self, status: str, output: list[dict[str, Any]] | None = None,
               usage: dict[str, Any] | None = None, error: dict[str, Any] | None = None,
               incomplete: str | None = None) -> dict[str, Any]:
        request = self.request
        text_format = self._text_format
        return {
            "id": self.id, "object": "response", "created_at": self.created_at,
            "status": status, "background": request.background,
            "error": error,
            "incomplete_details": {"reason": incomplete} if incomplete else None,
            "instructions": request.instructions,
            "max_output_tokens": request.max_output_tokens,
            "metadata": request.metadata or {},
            "model": self.model,
            "output": output or [],
            "parallel_tool_calls": request.parallel_tool_calls is not False,
            "previous_response_id": request.previous_response_id,
            "reasoning": {"effort": request.reasoning.effort if request.reasoning else None,
                          "summary": None},
            "store": request.store,
            "temperature": request.temperature,
            "text": {"format": text_format},
            "tool_choice": request.tool_choice if request.tool_choice is not None else "auto",
            "tools": self.tools,
            "top_p": request.top_p,
            "truncation": request.truncation or "disabled",
            "usage": usage,
            "user": request.user,
        }


def usage(chat_usage: dict[str, Any], reasoning_tokens: int) -> dict[str, Any]:
    """The chat route's usage in the Responses API's names."""
    return {
        "input_tokens": chat_usage["prompt_tokens"],
        "input_tokens_details": {  # nothing is written to a cache a client pays for
            "cached_tokens": chat_usage["prompt_tokens_details"]["cached_tokens"],
            "cache_write_tokens": 0},
        "output_tokens": chat_usage["completion_tokens"],
        "output_tokens_details": {"reasoning_tokens": reasoning_tokens},
        "total_tokens": chat_usage["total_tokens"],
    }
