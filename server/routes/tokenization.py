"""vLLM's tokenizer endpoints, on the engine's tokenizer: `/tokenize`, `/detokenize`,
`/tokenizer_info`.

Same request fields, defaults and answers as vLLM's (`vllm/entrypoints/serve/tokenize/`).
A chat-style `/tokenize` renders the client's messages as the chat route does (the served
chat template, the tool definitions, `enable_thinking` from `chat_template_kwargs` or else
the profile's default, as vLLM's `--default-chat-template-kwargs` would set it) and adds
nothing of memory's: it is what the prompt holds with memory off. Nothing here writes
anything or touches the engine itself.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from jinja2 import TemplateError
from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from engine.backend import EngineBackend
from server.http.errors import APIError, validation_error
from server.http.schema import ChatCompletionRequest
from server.turn.checks import model_names
from server.turn.prompt import render_chat


class TokenizeCompletionRequest(BaseModel):
    """`/tokenize` of a plain prompt."""

    model_config = ConfigDict(extra="forbid")
    model: str | None = None
    prompt: str
    add_special_tokens: bool = True  # vLLM's default for a plain prompt
    return_token_strs: bool | None = False


class TokenizeChatRequest(BaseModel):
    """`/tokenize` of a conversation, rendered with the chat template."""

    model_config = ConfigDict(extra="forbid")
    model: str | None = None
    messages: list[dict[str, Any]]  # checked as the chat route checks them
    add_generation_prompt: bool = True
    continue_final_message: bool = False
    add_special_tokens: bool = False  # the template writes the special tokens itself
    return_token_strs: bool | None = False
    tools: list[dict[str, Any]] | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    chat_template: str | None = None  # refused: see _refuse_request_template
    # vLLM's multimodal knobs: nothing to pass them to in a text model, accepted empty.
    media_io_kwargs: dict[str, dict[str, Any]] | None = None
    mm_processor_kwargs: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _one_ending(self) -> TokenizeChatRequest:
        if self.continue_final_message and self.add_generation_prompt:
            raise ValueError("Cannot set both `continue_final_message` and "
                             "`add_generation_prompt` to True.")
        return self


class DetokenizeRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    model: str | None = None
    tokens: list[int]


def _validated(model: type[BaseModel], body: dict) -> Any:
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        raise validation_error(exc) from None


def _check_model(engine: EngineBackend, model: str | None) -> None:
    """vLLM's rule: no model (or an empty name) means the served one; another is a 404."""
    if model and model not in model_names(engine.profile):
        raise APIError(404, f"model {model!r} does not exist; this server serves "
                       f"{engine.profile.name!r}", code="model_not_found", param="model")


def tokenize(engine: EngineBackend, body: dict) -> dict[str, Any]:
    """vLLM's TokenizeResponse for a body with `prompt` or with `messages`."""
    request = _validated(TokenizeChatRequest if "messages" in body
                         else TokenizeCompletionRequest, body)
    _check_model(engine, request.model)
    tokenizer = engine.tokenizer
    text = (request.prompt if isinstance(request, TokenizeCompletionRequest)
            else _render(engine, request))
    ids = list(tokenizer.encode(text, add_special_tokens=request.add_special_tokens))
    return {"count": len(ids), "max_model_len": engine.profile.max_model_len, "tokens": ids,
            "token_strs": tokenizer.convert_ids_to_tokens(ids)
            if request.return_token_strs else None}


def _render(engine: EngineBackend, request: TokenizeChatRequest) -> str:
    """The conversation's text as the chat route renders it, ended as the request asks."""
    if request.chat_template is not None:
        # A template is code the server would run: vLLM refuses one from a request unless
        # started with --trust-request-chat-template, and Tandem has no such switch.
        raise APIError(400, "chat_template: this server renders with the served model's "
                       "chat template and does not take one from a request",
                       code="invalid_value", param="chat_template")
    if request.media_io_kwargs or request.mm_processor_kwargs:
        raise APIError(400, "media_io_kwargs, mm_processor_kwargs: this server serves a "
                       "text model", code="invalid_value", param="mm_processor_kwargs")
    chat = _validated(ChatCompletionRequest, {
        "model": engine.profile.name, "messages": request.messages, "tools": request.tools,
        "chat_template_kwargs": request.chat_template_kwargs})
    enable_thinking = chat.enable_thinking(engine.profile.thinking)
    try:
        rendered = render_chat(engine.tokenizer, chat, enable_thinking)
        return engine.tokenizer.apply_chat_template(
            rendered.messages, tools=rendered.tools, tokenize=False,
            add_generation_prompt=request.add_generation_prompt,
            continue_final_message=request.continue_final_message,
            enable_thinking=enable_thinking)
    except (TemplateError, ValueError) as exc:  # the template's own refusal of the messages
        raise APIError(400, f"messages: the chat template cannot render them: {exc}",
                       code="invalid_value", param="messages") from None


def detokenize(engine: EngineBackend, body: dict) -> dict[str, str]:
    """vLLM's DetokenizeResponse: the ids' text, special tokens written out."""
    request = _validated(DetokenizeRequest, body)
    _check_model(engine, request.model)
    vocabulary = len(engine.tokenizer)
    outside = [t for t in request.tokens if not 0 <= t < vocabulary]
    if outside:
        raise APIError(400, f"tokens: token id {outside[0]} is out of vocabulary (ids are "
                       f"0 to {vocabulary - 1})", code="invalid_value", param="tokens")
    return {"prompt": engine.tokenizer.decode(request.tokens)}


# init_kwargs that name files on the server's disk: not the client's business.
_FILE_FIELDS = ("vocab_file", "merges_file", "tokenizer_file")


def tokenizer_info(engine: EngineBackend) -> dict[str, Any]:
    """vLLM's TokenizerInfoResponse: the tokenizer's settings (its tokenizer_config.json),
    its class, and the chat template the server renders with."""
    tokenizer = engine.tokenizer
    config = {k: v for k, v in (getattr(tokenizer, "init_kwargs", None) or {}).items()
              if k not in _FILE_FIELDS}
    name = config.get("name_or_path")
    if isinstance(name, str) and Path(name).is_absolute():  # a folder on the server's disk
        config["name_or_path"] = engine.profile.tokenizer or engine.profile.model
    config = _json_ready(config)
    config["tokenizer_class"] = type(tokenizer).__name__
    if getattr(tokenizer, "chat_template", None):
        config["chat_template"] = tokenizer.chat_template
    return config


def _json_ready(value: Any) -> Any:
    """Added tokens as their text, mappings with string keys (as vLLM's answer has them)."""
    if hasattr(value, "content"):
        return value.content
    if isinstance(value, dict):
        return {str(k): _json_ready(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_ready(v) for v in value]
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return str(value)
