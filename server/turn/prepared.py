"""A chat request made ready for the engine: its prompt ids, memory context and parameters.

`server/turn/chat_turn.py` makes one (`prepare`); `server/turn/answering/respond.py` answers it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from conductor.memory.context import MemoryContext
from conductor.memory.turn import HiddenContext
from conductor.memory.types import Span, VisibleMessage
from engine.generation import GenerationParams
from server.turn.answering.answer import RecordedTurn
from server.turn.constraints.tool_choice import ForcedChoice


@dataclass
class PreparedChat:
    """A validated request, with its prompt ids, its memory context and engine parameters."""

    completion_id: str
    model: str
    prompt_ids: list[int]
    params: GenerationParams
    parse_tools: bool
    memory: MemoryContext
    visible: list[VisibleMessage]
    spans: list[Span]
    token: str | None  # the session's memory-routes token, when memory is on for it
    enable_thinking: bool = False
    engine_tools: bool = False  # memory_search and memory_read are in the tool catalog
    # Scripted profiles: the forced ids of each generation (one follows each engine-tool
    # call), None for one the model writes itself; past the list's end a generation
    # ends at once.
    scripts: tuple[tuple[int, ...] | None, ...] = ()
    forced: ForcedChoice | None = None  # tool_choice "required" or named: JSON for the call
    json_answer: bool = False  # response_format holds the answer to JSON: no blocks, no calls
    replayed_tokens: int = 0  # prompt ids taken from the ledger as they were
    hidden: HiddenContext = field(default_factory=HiddenContext)  # what this turn added
    # False: a fresh layout on a hybrid model, which keeps the recurrent state at the
    # prompt's last block boundary only, not at the shared context's end: prewarm it.
    head_checkpointed: bool = True
    created: int = field(default_factory=lambda: int(time.time()))
    # Called once the turn is recorded, on the event loop: the continuous conversation
    # numbers it in its history at once and writes the file in a worker thread.
    on_recorded: Callable[[RecordedTurn], None] | None = None
    # vLLM's extras: n choices (this is choice `choice`; only choice 0 is recorded), the
    # ids of the prompt and of each answer, reasoning shown or not, tokens named by id.
    choices: int = 1
    choice: int = 0
    return_token_ids: bool = False
    include_reasoning: bool = True
    tokens_as_ids: bool = False
    echo: str = ""  # vLLM's chat echo: the last (assistant) message, shown before the answer
    recorded: bool = True  # False: the client shaped the prompt's end; the ledger skips it
    ledger_kept: bool = True  # False: the turn is answered and counted, but not a record
    # an explicit memory command's status lines (after the answer) and response header
    command_lines: tuple[str, ...] = ()
    command_header: dict[str, str] = field(default_factory=dict)

    @property
    def records(self) -> bool:
        return self.choice == 0 and self.recorded

    @property
    def request_id(self) -> str:
        """The engine request's id: the completion's, with the choice for n > 1."""
        return self.completion_id if self.choice == 0 else f"{self.completion_id}-{self.choice}"

    @property
    def ledger_user(self) -> str:
        return self.memory.user or "-relayed-"

    def script_for(self, generation: int) -> tuple[int, ...] | None:
        """The forced ids of the answer's `generation`-th engine generation (0: the first)."""
        if not self.scripts:
            return None
        return self.scripts[generation] if generation < len(self.scripts) else ()
