"""The request bodies of the OpenAI routes, validated with the limits OpenAI documents."""

from __future__ import annotations

import logging
from importlib.metadata import PackageNotFoundError, version
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError


class FunctionCall(BaseModel):
    name: str
    arguments: str | dict[str, Any] = "{}"


class ToolCallIn(BaseModel):
    model_config = ConfigDict(extra="allow")
    id: str | None = None
    type: Literal["function"] = "function"
    function: FunctionCall


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[dict[str, Any]] | None = None
    name: str | None = None
    tool_calls: list[ToolCallIn] | None = None
    tool_call_id: str | None = Field(default=None, validate_default=True)
    reasoning_content: str | None = None
    reasoning: str | None = None  # vLLM's name for reasoning_content; either is replayed

    @model_validator(mode="after")
    def _one_reasoning(self) -> ChatMessage:
        if self.reasoning_content is None and self.reasoning is not None:
            self.reasoning_content = self.reasoning
        return self

    @field_validator("tool_call_id", mode="after")
    @classmethod
    def _tool_answers_name_their_call(cls, value: str | None, info: ValidationInfo
                                      ) -> str | None:
        if info.data.get("role") == "tool" and not value:
            # As OpenAI's API: the answer to a call says which call it answers.
            raise ValueError("a tool message needs the id of the call it answers")
        return value

    def text(self) -> str:
        """The content as one string; text parts are joined, other parts are refused."""
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        parts = []
        for part in self.content:
            if part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise ValueError("only text content parts are supported")
            parts.append(part["text"])
        return "".join(parts)


class ToolFunction(BaseModel):
    model_config = ConfigDict(extra="allow")
    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None


class ToolDefinition(BaseModel):
    type: Literal["function"] = "function"
    function: ToolFunction


class StreamOptions(BaseModel):
    include_usage: bool = False
    continuous_usage_stats: bool = False  # vLLM's: every chunk carries the usage so far


def _fingerprint() -> str:
    try:
        return f"tandem-{version('tandem')}"
    except PackageNotFoundError:
        return "tandem"


log = logging.getLogger("tandem.server")

# vLLM's engine client sends a request's numbers as int64: a larger one failed there (a
# 500); each count a request may name is bounded by it, so the 400 names the field.
INT64_MAX = 2**63 - 1


def checked_stops(value: str | list[str] | None) -> str | list[str] | None:
    """A `stop` (or `stop_sequences`): at most 4, none empty (vLLM refuses an empty one
    in the engine, where the 400 would name no field)."""
    stops = [value] if isinstance(value, str) else value or []
    if len(stops) > 4:
        raise ValueError("at most 4 stop sequences")
    if any(stop == "" for stop in stops):
        raise ValueError("a stop sequence cannot be empty")
    return value


# Sent as `system_fingerprint`, as vLLM and OpenAI send theirs: what served the answer.
SYSTEM_FINGERPRINT = _fingerprint()

# OpenAI chat fields a local server takes and has no use for: accepted, no effect (the
# README lists them). A field in neither list nor declared below is ignored, with a log
# line naming it (vLLM's rule).
ACCEPTED_NO_EFFECT = ("user", "metadata", "safety_identifier", "prompt_cache_key")
REFUSED = {
    "audio": "audio output is not supported",
    "prediction": "predicted outputs are not supported",
    "web_search_options": "web search is not supported",
    "functions": "the deprecated functions API is not supported: send tools",
    "function_call": "the deprecated functions API is not supported: send tool_choice",
    "verbosity": "verbosity is not supported",
}
# n: the most choices one request may ask for (vLLM leaves it to the scheduler; each
# choice is one more sequence in the engine's batch).
MAX_CHOICES = 16
MAX_LOGPROB_TOKEN_IDS = 128  # vLLM's bound: the sampler keeps a row of this width a request


class StructuredOutputs(BaseModel):
    """vLLM's `structured_outputs`: the answer constrained to one of `choice`, to match
    `regex`, to JSON under `json` (a schema) or any JSON (`json_object`), or to `grammar`
    (EBNF); one of them, through vLLM's own structured-output backend."""

    model_config = ConfigDict(extra="forbid")
    choice: list[str] | None = None
    regex: str | None = None
    json_: dict[str, Any] | StrictBool | str | None = Field(default=None, alias="json")
    json_object: StrictBool | None = None
    grammar: str | None = None
    disable_any_whitespace: StrictBool = False

    @model_validator(mode="after")
    def _exactly_one(self) -> StructuredOutputs:
        given = [n for n in ("choice", "regex", "json_", "json_object", "grammar")
                 if getattr(self, n) not in (None, False)]
        if len(given) != 1:
            raise ValueError("give exactly one of choice, regex, json, json_object, grammar")
        if self.choice is not None and not self.choice:
            raise ValueError("choice: give at least one")
        return self


def ignore_unknown(model: BaseModel) -> None:
    """vLLM's rule for a field the server does not know: ignored, and said once in the log
    (an agent's own fields, such as Codex's `client_metadata`, must not stop it). Only the
    names are logged, shortened; a field that would change the answer is in REFUSED."""
    extra = model.__pydantic_extra__
    if extra:
        names = ", ".join(repr(name)[:40] for name in list(extra)[:10])
        log.warning("The following fields were present in the request but ignored: %s",
                    names)
        extra.clear()


def refuse_unserved(model: BaseModel, refused: dict[str, str],
                    unsupported: dict[str, str | None]) -> None:
    """A 400 naming the first field set that is never served (`refused`: field -> why),
    or that is not served as sent (`unsupported`: field -> why, None where it is)."""
    reasons = {name: why for name, why in refused.items() if getattr(model, name) is not None}
    reasons |= {name: why for name, why in unsupported.items() if why is not None}
    for name, why in reasons.items():
        raise PydanticCustomError("unsupported", "{name}: {why}", {"name": name, "why": why})


THINKING_EFFORT = {"none": False, "minimal": False, "low": True, "medium": True, "high": True}


def _kv_transfer_refusal(params: dict[str, Any] | None) -> str | None:
    if params is None:
        return None
    if set(params) != {"prompt_token_ids"}:
        return "only prompt_token_ids: this server runs no KV connector"
    ids = params["prompt_token_ids"]
    if not isinstance(ids, list) or not ids or not all(
            isinstance(i, int) and not isinstance(i, bool) for i in ids):
        return "prompt_token_ids: a non-empty list of token ids"
    return None


def _continue_refusal(request: ChatCompletionRequest) -> str | None:
    if not request.continue_final_message:
        return None
    if request.add_generation_prompt:
        return "not with add_generation_prompt: true (vLLM's rule: one ending or the other)"
    if request.messages[-1].role != "assistant":
        return "the last message must be the assistant's, to be continued"
    return None


class ChatCompletionRequest(BaseModel):
    model_config = ConfigDict(extra="allow")  # unknown fields: ignored (ignore_unknown)
    model: str | None = None  # as vLLM: none is the served model
    messages: list[ChatMessage] = Field(min_length=1)
    stream: StrictBool = False
    stream_options: StreamOptions | None = None
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    top_k: int | None = Field(default=None, ge=-1, le=INT64_MAX)
    n: int = Field(default=1, ge=1, le=MAX_CHOICES)
    seed: int | None = Field(default=None, ge=-INT64_MAX - 1, le=INT64_MAX)
    stop: str | list[str] | None = None
    presence_penalty: float | None = Field(default=None, ge=-2.0, le=2.0)
    frequency_penalty: float | None = Field(default=None, ge=-2.0, le=2.0)
    tools: list[ToolDefinition] | None = None
    tool_choice: Literal["none", "auto", "required"] | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None  # False: "required" makes exactly one call
    response_format: dict[str, Any] | None = None  # text, json_object or json_schema
    logit_bias: dict[str, float] | None = None  # token id (as a string) -> bias, -100..100
    min_p: float | None = Field(default=None, ge=0.0, le=1.0)  # vLLM's sampling extras
    repetition_penalty: float | None = Field(default=None, gt=0.0, le=2.0)
    reasoning_effort: Literal["none", "minimal", "low", "medium", "high"] | None = None
    logprobs: StrictBool | None = None
    top_logprobs: int | None = Field(default=None, ge=-1)  # bound: profile.max_logprobs
    store: StrictBool | None = None  # false only: a local server stores nothing
    service_tier: str | None = None  # "auto" or "default": there is one tier
    modalities: list[str] | None = None  # ["text"] only
    user: str | None = None
    metadata: dict[str, str] | None = None
    safety_identifier: str | None = None
    prompt_cache_key: str | None = None  # the prefix cache needs no key
    audio: Any = None
    prediction: Any = None
    web_search_options: Any = None
    functions: Any = None
    function_call: Any = None
    verbosity: Any = None
    chat_template_kwargs: dict[str, Any] | None = None
    # vLLM's request extras, with vLLM's meaning (the README's table says "as vLLM").
    min_tokens: int = Field(default=0, ge=0, le=INT64_MAX)
    prompt_logprobs: int | None = Field(default=None, ge=-1)
    logprob_token_ids: list[int] | None = Field(default=None, min_length=1,
                                                max_length=MAX_LOGPROB_TOKEN_IDS)
    allowed_token_ids: list[int] | None = Field(default=None, min_length=1)
    return_token_ids: StrictBool | None = None
    include_reasoning: StrictBool = True
    structured_outputs: StructuredOutputs | None = None
    return_tokens_as_token_ids: StrictBool | None = None
    thinking_token_budget: int | None = Field(default=None, ge=-1, le=INT64_MAX)  # -1: none
    # The prompt's end, as vLLM: the generation prompt left out, or the last (assistant)
    # message left open for the answer to continue; `echo` repeats that message first.
    add_generation_prompt: StrictBool = True
    continue_final_message: StrictBool = False
    echo: StrictBool = False
    # vLLM's disaggregated-prefill hand-over; Tandem takes its `prompt_token_ids` (the
    # prompt's ids, used verbatim) and runs no KV connector for the rest.
    kv_transfer_params: dict[str, Any] | None = None
    # Scripted profiles only (refused elsewhere): the answer's forced text, or one text a
    # generation when the model calls engine tools (the first ends with the call; null:
    # that generation is the model's own).
    script: str | list[str | None] | None = None

    @field_validator("stop")
    @classmethod
    def _stops(cls, value: str | list[str] | None) -> str | list[str] | None:
        return checked_stops(value)

    @model_validator(mode="after")
    def _refuse_what_is_not_served(self) -> ChatCompletionRequest:
        ignore_unknown(self)
        refuse_unserved(self, REFUSED, {
            "top_logprobs": "needs logprobs: true"
            if self.top_logprobs is not None and not self.logprobs else None,
            "logprob_token_ids": "needs logprobs: true"
            if self.logprob_token_ids and not self.logprobs else None,
            "store": "this server does not store completions" if self.store else None,
            "service_tier": "there is one service tier: 'auto' or 'default'"
            if self.service_tier not in (None, "auto", "default") else None,
            "modalities": "the only modality is 'text'"
            if self.modalities not in (None, ["text"]) else None,
            "stream_options": "only with stream: true"
            if self.stream_options is not None and not self.stream else None,
            "continue_final_message": _continue_refusal(self),
            "kv_transfer_params": _kv_transfer_refusal(self.kv_transfer_params),
            "min_tokens": "must not exceed max_tokens"
            if (self.requested_max_tokens() or self.min_tokens) < self.min_tokens else None,
            "structured_outputs": "and response_format or a forced tool call cannot both "
            "constrain the answer" if self.structured_outputs is not None
            and (self.response_format not in (None, {"type": "text"})
                 or self.tool_choice not in (None, "none", "auto")) else None,
        })
        return self

    @field_validator("logit_bias")
    @classmethod
    def _bias_by_token_id(cls, value: dict[str, float] | None) -> dict[str, float] | None:
        bad = [repr(token) for token in value or {} if not token.isdigit()]
        if bad:  # every bad key named, as vLLM does
            raise ValueError(f"keys are token ids; {', '.join(bad)} "
                             f"{'is not one' if len(bad) == 1 else 'are not'}")
        for token, bias in (value or {}).items():
            if not -100.0 <= bias <= 100.0:
                raise ValueError(f"biases are between -100 and 100; {token}: {bias}")
        return value

    @field_validator("top_k")
    @classmethod
    def _top_k_not_zero(cls, value: int | None) -> int | None:
        if value == 0:
            raise ValueError("top_k must be -1 (off) or at least 1")
        return value

    def runs_without_memory(self) -> bool:
        """The response shows the prompt's ids or log-probabilities (a hidden part's are
        not the client's to see), or the client shapes the prompt's end itself (memory's
        parts have no place after an open message, and an echoed answer is not the
        model's turn to record)."""
        return (bool(self.return_token_ids) or self.prompt_logprobs is not None
                or self.shapes_its_prompt())

    def shapes_its_prompt(self) -> bool:
        """The client, not the chat template, says how the prompt ends (or hands its ids
        over): such a turn is not the conversation's, and is not recorded."""
        return (self.continue_final_message or not self.add_generation_prompt
                or bool(self.echoed()) or self.forwarded_ids() is not None)

    def forwarded_ids(self) -> list[int] | None:
        """The prompt's ids handed over in kv_transfer_params, used as they are."""
        return (self.kv_transfer_params or {}).get("prompt_token_ids")

    def echoed(self) -> str:
        """What `echo` repeats before the answer: the last message, when the
        assistant's (vLLM's rule: the same role as the answer's)."""
        last = self.messages[-1]
        if not self.echo or last.role != "assistant" or last.content is None:
            return ""
        if isinstance(last.content, str):
            return last.content
        return "\n".join(part.get("text", "") for part in last.content
                         if isinstance(part, dict))

    def stops(self) -> tuple[str, ...]:
        if self.stop is None:
            return ()
        return (self.stop,) if isinstance(self.stop, str) else tuple(self.stop)

    def requested_max_tokens(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens

    def enable_thinking(self, default: bool) -> bool:
        """chat_template_kwargs.enable_thinking, else reasoning_effort ("none" and
        "minimal": off; "low" to "high": on), else the profile's default."""
        if self.reasoning_effort is not None:
            default = THINKING_EFFORT[self.reasoning_effort]
        value = (self.chat_template_kwargs or {}).get("enable_thinking", default)
        return bool(value)
