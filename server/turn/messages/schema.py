"""The bodies of POST /v1/messages and /v1/messages/count_tokens (Anthropic's Messages API).

The top-level fields are checked here, with Anthropic's bounds. The content blocks
(`messages`, `system`, `tools`) stay plain dicts: their many shapes are checked one by one
where they become chat messages (`server/turn/messages/blocks.py`), so that an error names
the block (`messages[2].content[0].tool_use_id`), not pydantic's union of every shape.
vLLM's own models (`vllm/entrypoints/anthropic/protocol.py`) are not imported: vLLM is an
optional dependency (proxy mode serves without it), and they leave the blocks to a union.

As on the chat route (vLLM's rule), a field this server does not know is ignored with a
log line naming it: Anthropic adds fields with each beta, and Claude Code sends them
(`context_management`, ...); a field whose effect this server cannot give is refused.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, field_validator, model_validator

from server.http.schema import INT64_MAX, checked_stops, ignore_unknown, refuse_unserved

# Anthropic's least thinking budget (its API refuses a smaller one, as vLLM's protocol does)
MIN_THINKING_BUDGET = 1024
REFUSED = {
    "mcp_servers": "MCP servers are not run by this server: the client runs its tools",
    "container": "code execution containers are not served",
}


class ToolChoice(BaseModel):
    """`tool_choice`: auto, any (a call is required), tool (that one), none."""

    model_config = ConfigDict(extra="forbid")
    type: Literal["auto", "any", "tool", "none"]
    name: str | None = None
    disable_parallel_tool_use: StrictBool | None = None

    @model_validator(mode="after")
    def _tool_is_named(self) -> ToolChoice:
        if self.type == "tool" and not self.name:
            raise ValueError("a tool_choice of type 'tool' names the tool (name)")
        return self


class Thinking(BaseModel):
    """`thinking`: enabled with a budget, adaptive (the model's own depth), or disabled."""

    model_config = ConfigDict(extra="allow")  # `display` and later fields: no effect here
    type: Literal["enabled", "disabled", "adaptive"]
    budget_tokens: int | None = Field(default=None, ge=MIN_THINKING_BUDGET, le=INT64_MAX)

    @model_validator(mode="after")
    def _budget_when_enabled(self) -> Thinking:
        if self.type == "enabled" and self.budget_tokens is None:
            raise ValueError("thinking of type 'enabled' needs budget_tokens")
        return self

    @property
    def on(self) -> bool:
        return self.type != "disabled"


class OutputConfig(BaseModel):
    """`output_config`: its `effort` has no effect here (Qwen's thinking is on or off);
    a JSON `format` is served on the chat route (`response_format`), not here."""

    model_config = ConfigDict(extra="allow")
    effort: str | None = None
    format: Any = None

    @model_validator(mode="after")
    def _no_format(self) -> OutputConfig:
        refuse_unserved(self, {"format": "structured outputs are served on "
                                         "/v1/chat/completions (response_format)"}, {})
        return self


class MessagesInput(BaseModel):
    """What both routes read: the conversation, its system prompt, tools and thinking."""

    model_config = ConfigDict(extra="allow")  # unknown fields: ignored (ignore_unknown)
    model: str = Field(min_length=1)
    messages: list[dict[str, Any]]
    system: str | list[dict[str, Any]] | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: ToolChoice | None = None
    thinking: Thinking | None = None
    output_config: OutputConfig | None = None
    mcp_servers: Any = None
    container: Any = None

    @model_validator(mode="after")
    def _refuse_what_is_not_served(self) -> MessagesInput:
        ignore_unknown(self)
        refuse_unserved(self, REFUSED, {})
        return self


class MessagesRequest(MessagesInput):
    """POST /v1/messages: `max_tokens` is required, as Anthropic's API has it."""

    max_tokens: int = Field(ge=1)
    stream: StrictBool = False
    stop_sequences: list[str] | None = Field(default=None, max_length=4)
    temperature: float | None = Field(default=None, ge=0.0, le=1.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    top_k: int | None = Field(default=None, ge=1, le=INT64_MAX)
    # Accepted, no effect: nothing is monitored, there is one tier, the prefix cache needs
    # no breakpoints (`cache_control`, anywhere, is ignored the same way).
    metadata: dict[str, Any] | None = None
    service_tier: str | None = None
    # Scripted profiles only, as on the chat route: the answer's forced text (with
    # Anthropic's SDK: extra_body={"script": ...}).
    script: str | list[str | None] | None = None

    @field_validator("stop_sequences")
    @classmethod
    def _stops(cls, value: list[str] | None) -> list[str] | None:
        return checked_stops(value)

    @model_validator(mode="after")
    def _budget_under_max_tokens(self) -> MessagesRequest:
        budget = self.thinking.budget_tokens if self.thinking is not None else None
        if budget is not None and budget >= self.max_tokens:
            raise ValueError("thinking.budget_tokens must be less than max_tokens")
        return self


class CountTokensRequest(MessagesInput):
    """POST /v1/messages/count_tokens: the prompt a request of these fields would send."""
