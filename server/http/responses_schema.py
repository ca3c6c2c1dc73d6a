"""The body of POST /v1/responses, validated with the limits OpenAI documents.

Items (`input`, `tools`) stay plain dicts here: their many shapes are checked one by one
where they become chat messages (`server/turn/responses/items.py`), so that an error
names the item (`input[2].call_id`), not pydantic's union of every shape.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, field_validator, model_validator

from server.http.schema import ignore_unknown, refuse_unserved

# Fields of the Responses API a local server takes and has no use for: accepted, no effect.
ACCEPTED_NO_EFFECT = ("user", "safety_identifier", "prompt_cache_key", "service_tier",
                      "truncation", "include", "stream_options")
REFUSED = {
    "conversation": "the Conversations API is not served: chain responses with "
                    "previous_response_id",
    "prompt": "stored prompt templates are not served: send instructions and input",
    "max_tool_calls": "is not served: the client runs its tools and decides when to stop",
    "top_logprobs": "log-probabilities are served on /v1/chat/completions",
}
MAX_ID_CHARS = 256  # an id or a user's name that is stored
MAX_METADATA_KEYS = 16  # OpenAI's bounds: 16 pairs, keys of 64 and values of 512 characters


class TextFormat(BaseModel):
    """`text.format`: plain text, any JSON object, or JSON under a schema."""

    model_config = ConfigDict(extra="forbid")
    type: Literal["text", "json_object", "json_schema"]
    name: str | None = None
    schema_: dict[str, Any] | None = Field(default=None, alias="schema")
    description: str | None = None
    strict: bool | None = None

    @model_validator(mode="after")
    def _schema_with_json_schema(self) -> TextFormat:
        if self.type == "json_schema" and (self.schema_ is None or not self.name):
            raise ValueError("a json_schema format needs its name and its schema")
        return self


class TextOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    format: TextFormat | None = None
    verbosity: Literal["low", "medium", "high"] | None = None  # accepted, no effect


class ReasoningOptions(BaseModel):
    """`reasoning`: its effort turns Qwen's thinking on or off (the chat route's rule)."""

    model_config = ConfigDict(extra="forbid")
    effort: Literal["none", "minimal", "low", "medium", "high"] | None = None
    summary: Literal["auto", "concise", "detailed"] | None = None  # no summaries: the text
    generate_summary: Literal["auto", "concise", "detailed"] | None = None


class ResponsesRequest(BaseModel):
    model_config = ConfigDict(extra="allow")  # unknown fields: ignored (ignore_unknown)
    model: str | None = None
    input: str | list[dict[str, Any]] = Field(min_length=1)
    instructions: str | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: Literal["none", "auto", "required"] | dict[str, Any] | None = None
    parallel_tool_calls: StrictBool | None = None
    text: TextOptions | None = None
    reasoning: ReasoningOptions | None = None
    max_output_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    stream: StrictBool = False
    store: StrictBool = True
    background: StrictBool = False
    # Strings stored with the response are bounded (a 400 names the field past its bound)
    previous_response_id: str | None = Field(default=None, max_length=MAX_ID_CHARS)
    metadata: dict[str, str] | None = None
    user: str | None = Field(default=None, max_length=MAX_ID_CHARS)
    safety_identifier: str | None = Field(default=None, max_length=MAX_ID_CHARS)
    prompt_cache_key: str | None = Field(default=None, max_length=MAX_ID_CHARS)
    service_tier: str | None = Field(default=None, max_length=64)
    truncation: Literal["auto", "disabled"] | None = None
    include: list[str] | None = None
    stream_options: dict[str, Any] | None = None
    conversation: Any = None
    prompt: Any = None
    max_tool_calls: Any = None
    top_logprobs: Any = None
    # Scripted profiles only, as on the chat route: the answer's forced text.
    script: str | list[str | None] | None = None

    @field_validator("metadata")
    @classmethod
    def _metadata_within_bounds(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        if value is None:
            return value
        if len(value) > MAX_METADATA_KEYS:
            raise ValueError(f"at most {MAX_METADATA_KEYS} pairs")
        for key, text in value.items():
            if len(key) > 64 or len(text) > 512:
                raise ValueError("keys of at most 64 characters, values of at most 512")
        return value

    @model_validator(mode="after")
    def _refuse_what_is_not_served(self) -> ResponsesRequest:
        ignore_unknown(self)
        refuse_unserved(self, REFUSED, {
            "background": "background can only be used when `store` is true (it is "
                          "polled from the store)" if self.background and not self.store else
                          "and stream cannot both be true here: poll GET "
                          "/v1/responses/{id}" if self.background and self.stream else None,
            "stream_options": "only with stream: true"
            if self.stream_options is not None and not self.stream else None,
        })
        return self
