"""The engine's own tools: `memory_search` and `memory_read`, offered to the model next to
the client's tools and run by the server inside the model's turn.

With memory read on (`on`, or `X-Tandem-Memory: read`), every prompt's tool catalog holds
these two definitions first, so the catalog (and the prefix cache) is the same for every
session with the same system prompt. A call to one of them never reaches the client: the
server runs it here and the answer goes on after its response (`server/turn/answering/generate.py`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from dataclasses import dataclass
from typing import Any

import jsonschema

from conductor.memory.context import MemoryContext, status_line
from conductor.memory.hiding import RefError, read_ref, visible_hits, visible_note_ids
from conductor.memory.services import MemoryServices
from conductor.memory.types import COLLECTIONS, SourceError
from server.http.schema import ChatCompletionRequest, ToolDefinition
from server.turn.answering.output_parser import ToolCall

log = logging.getLogger("tandem.chat")

SEARCH, READ = "memory_search", "memory_read"
NAMES = frozenset((SEARCH, READ))
SNIPPET_CHARS = 200
SEARCH_LIMIT = 5  # entries a memory_search answers with

# Every prompt with memory read on carries this catalog, so each token costs every request
# (attention reads it at every step, even once it is cached). Worded short: 258 tokens
# with Qwen's own tool preamble, was 378 (memory on's hidden tokens were 7% of plain
# vLLM's time under 32 clients on the tiny model). Shown as few choices as serve the
# model: no `limit` (a search gives SEARCH_LIMIT entries), no `additionalProperties`
# (an extra argument is ignored, not refused).
DEFINITIONS: tuple[dict[str, Any], ...] = (
    {"type": "function", "function": {
        "name": SEARCH,
        "description": "Search your memory (notes, facts, preferences, projects, core "
                       "files, the library). Read an entry in full with memory_read.",
        "parameters": {"type": "object", "properties": {
            "query": {"type": "string"},
            "collection": {"type": "string", "enum": list(COLLECTIONS)}},
            "required": ["query"]}}},
    {"type": "function", "function": {
        "name": READ,
        "description": "Read a memory item in full, by a note id or a ref from "
                       "memory_search.",
        "parameters": {"type": "object", "properties": {"ref": {"type": "string"}},
                       "required": ["ref"]}}},
)
_PARAMETERS = {d["function"]["name"]: d["function"]["parameters"] for d in DEFINITIONS}


@dataclass(frozen=True)
class ToolLimits:
    """What one answer may spend on engine tools."""

    max_calls: int = 3  # after these, the tool-call token is banned for the rest of the turn
    response_tokens: int = 512  # a longer response is cut, and says so
    timeout_s: float = 10.0  # one call's time; past it the model is told it timed out


def with_engine_tools(request: ChatCompletionRequest, memory: MemoryContext,
                      model_calls_tools: bool = True) -> tuple[ChatCompletionRequest, bool]:
    """(the request with the engine tools first in its catalog, whether they were
    offered). A client that offers a tool named like an engine tool gets none of the
    engine's: its own is what it means (an agent given Tandem's memory tools over MCP, as
    Codex CLI sends them, under their bare names), and a 400 would stop it. A forcing
    tool_choice keeps them in the catalog (so the prompt's head does not change from turn
    to turn); its grammar only lets the answer call the client's tools. A model without a
    tool-call format (`tool_call_format: none`) is offered none."""
    if not memory.reads or not model_calls_tools:
        return request, False
    clash = sorted({t.function.name for t in request.tools or ()} & NAMES)
    if clash:
        log.info("the client offers its own %s: the engine's memory tools are left out",
                 ", ".join(clash))
        return request, False
    # tool_choice "none" keeps the client's tools out of the prompt; the engine's stay.
    client_tools = [] if request.tool_choice == "none" else list(request.tools or ())
    tools = [ToolDefinition.model_validate(d) for d in DEFINITIONS] + client_tools
    update: dict[str, Any] = {"tools": tools}
    if request.tool_choice == "none":
        update["tool_choice"] = "auto"
    return request.model_copy(update=update), True


@dataclass(frozen=True)
class ToolOutcome:
    status: str  # the line the client is shown for the call
    response: str  # what the model reads in the tool response
    ok: bool


def _one_line(text: str, limit: int) -> str:
    text = re.sub(r"\s+", " ", text).strip()
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


class EngineToolbox:
    """Runs engine-tool calls for a user; every failure is a response the model reads."""

    def __init__(self, memory: MemoryServices, search, tokenizer,
                 limits: ToolLimits = ToolLimits()) -> None:
        self.memory = memory
        self.search = search  # server.idle.search.SearchService
        self.tokenizer = tokenizer
        self.limits = limits

    async def run(self, call: ToolCall, user: str, project: str | None = None,
                  session: str | None = None) -> ToolOutcome:
        """Run one call for `user`, reading only what the request may read (the user's
        notes, `project`'s, `session`'s own: conductor.hidden.shared_context.visible_note_ids)."""
        arguments, problem = self._arguments(call)
        status = self._status(call, arguments)
        if problem is not None:
            return ToolOutcome(status, f"Error: {problem}", ok=False)
        visible = await asyncio.to_thread(visible_note_ids, self.memory.store(user), project,
                                          session)
        work = (self._search(user, arguments, visible) if call.name == SEARCH
                else self._read(user, arguments, visible))
        try:
            text = await asyncio.wait_for(work, self.limits.timeout_s)
        except TimeoutError:
            return ToolOutcome(status, f"Error: {call.name} took longer than "
                               f"{self.limits.timeout_s:g} s; try again later", ok=False)
        except (RefError, SourceError) as exc:
            return ToolOutcome(status, f"Error: {exc}", ok=False)
        except Exception as exc:  # never a 500 for the client; the model is told, no content
            return ToolOutcome(status, f"Error: {call.name} failed ({type(exc).__name__})",
                               ok=False)
        return ToolOutcome(status, self._capped(text), ok=True)

    def _arguments(self, call: ToolCall) -> tuple[dict[str, Any], str | None]:
        if call.malformed:
            return {}, (f"the call is not valid JSON; write <tool_call>{{\"name\": "
                        f"\"{call.name}\", \"arguments\": {{...}}}}</tool_call>")
        try:
            arguments = json.loads(call.arguments or "{}")
        except ValueError:
            return {}, "the arguments are not valid JSON"
        try:
            jsonschema.validate(arguments, _PARAMETERS[call.name])
        except jsonschema.ValidationError as exc:
            where = "/".join(str(p) for p in exc.absolute_path)
            return {}, f"bad arguments{f' at {where}' if where else ''}: {exc.message}"
        return arguments, None

    @staticmethod
    def _status(call: ToolCall, arguments: dict[str, Any]) -> str:
        if call.name == SEARCH and arguments.get("query"):
            return status_line("searched memory", _one_line(arguments["query"], 80))
        if call.name == READ and arguments.get("ref"):
            return status_line("read memory", _one_line(arguments["ref"], 80))
        return status_line("memory tool failed", call.name)

    async def _search(self, user: str, arguments: dict[str, Any], visible: set[str]) -> str:
        query = arguments["query"]
        if not query.strip():
            return "Error: the query is empty"
        hits, _dense = await self.search.search(user, query, "hybrid",
                                                arguments.get("collection"),
                                                3 * SEARCH_LIMIT)
        hits = visible_hits(hits, visible, SEARCH_LIMIT)
        if not hits:
            return f"No memory matches {query!r}."
        lines = [f"{len(hits)} entries for {query!r}:"]
        for n, hit in enumerate(hits, 1):
            lines.append(f"{n}. {hit.ref} (score {hit.score:.2f})")
            # a note of a title alone has no text: its title (the section) is the snippet
            lines.append(f"   {_one_line(hit.text or hit.section, SNIPPET_CHARS)}")
        return "\n".join(lines)

    async def _read(self, user: str, arguments: dict[str, Any], visible: set[str]) -> str:
        def read() -> str:
            registry = self.search.index(user).registry()
            return read_ref(arguments["ref"], self.memory.store(user),
                            self.memory.layers(user), registry, visible)
        return await asyncio.to_thread(read)

    def _capped(self, text: str) -> str:
        ids = self.tokenizer.encode(text, add_special_tokens=False)
        cap = self.limits.response_tokens
        if len(ids) <= cap:
            return text
        kept = self.tokenizer.decode(ids[:cap], skip_special_tokens=True)
        return f"{kept}\n[cut at {cap} tokens: read one section by its ref for the rest]"
