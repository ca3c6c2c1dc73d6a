"""One answer as the client sees it, and its record in the ledger at the end.

Engine deltas go through the output parser (reasoning, content, tool calls) and the memory
filter (held-back blocks); what the client is shown is kept in order, the model's text
apart from the lines the server adds. An answer may span several engine generations: a
call to an engine tool ends one, and the next starts after the tool's response
(`server/turn/answering/generate.py`); the call and the response stay in the answer's ids
as a hidden span.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from conductor.memory.interface import MemoryDoor
from conductor.memory.turn import Tail, TurnOutcome
from conductor.memory.types import Span, VisibleMessage
from engine.generation import Delta, TokenLogprob
from server.turn.answering.logprobs import chat_logprob
from server.turn.answering.memblock import MemoryFilter
from server.turn.answering.output_parser import HeldCall, OutputParser, ParsedDelta, ToolCall
from server.turn.prompt import ids_for_text
from server.turn.tool_exchange import assistant_calls_text

TOOL_KIND = "tool"  # the hidden span of an engine tool's call and response


@dataclass(frozen=True)
class RecordedTurn:
    """One finished (or abandoned) answer, as the continuous conversation's history
    keeps it."""

    # What the client was shown, in order: ("text", the model's words, blocks held back)
    # or ("status", a line the server added).
    segments: list[tuple[str, str]]
    reasoning: str
    tool_calls: list[tuple[str | None, str, str]]  # (id, name, arguments)
    hidden: list[Tail]  # what this turn hid after its new messages
    interrupted: bool

    @property
    def written(self) -> str:
        return "".join(text for kind, text in self.segments if kind == "text")


@dataclass
class Answer:
    """Turns engine deltas into what the client sees, and records the turn at the end.
    `chat` is the server.turn.prepared.PreparedChat the answer is for."""

    chat: Any
    services: MemoryDoor
    tokenizer: Any
    parser: OutputParser
    memory_filter: MemoryFilter
    output_ids: list[int] = field(default_factory=list)  # everything after the prompt
    generation_start: int = 0  # where the running generation's ids start in output_ids
    engine_text: str = ""  # the running generation's text as the engine gave it
    reasoning: str = ""
    last: Delta | None = None
    segments: list[tuple[str, str]] = field(default_factory=list)  # ("text"|"status", text)
    tool_spans: list[Span] = field(default_factory=list)  # offsets into output_ids
    engine_calls: int = 0
    generated: int = 0  # ids the model generated (tool responses are not)
    inserted: int = 0  # ids the server put in (tool exchanges)
    prefills: list[tuple[int, int]] = field(default_factory=list)  # (prompt, cached) a generation
    out_of_room: bool = False  # no room was left for the generation after a tool call
    end_of_turn: int = -1  # the model's end-of-turn id: a record ending with it ended cleanly
    # (output offset, log-probability) of generated tokens not yet given to the client
    pending_logprobs: list[tuple[int, TokenLogprob]] = field(default_factory=list)
    prompt_logprobs: list | None = None  # Delta.prompt_logprobs of the first generation

    @classmethod
    def start(cls, chat, services: MemoryDoor, tokenizer, end_of_turn: int,
              engine_tools: frozenset[str] = frozenset()) -> Answer:
        # A JSON answer is JSON only: a block inside one of its strings is text.
        action = "pass" if chat.json_answer else chat.memory.block_action
        if action == "store" and not chat.records:  # choice 1.. of n: held back, not written
            action = "drop"
        store = services.store(chat.memory.user) if action == "store" else None
        return cls(chat, services, tokenizer,
                   OutputParser(parse_tools=chat.parse_tools, engine_tools=engine_tools),
                   MemoryFilter(action, chat.memory, store, chat.completion_id,
                                status_lines=list(chat.command_lines) if chat.records
                                else []),
                   end_of_turn=end_of_turn)

    # -- feeding ----------------------------------------------------------------------------
    def feed(self, delta: Delta) -> ParsedDelta:
        first = len(self.output_ids)
        self.output_ids += delta.token_ids
        self.generated += len(delta.token_ids)
        self.pending_logprobs += [(first + i, lp) for i, lp in enumerate(delta.token_logprobs)]
        self.engine_text += delta.text
        self.last = delta
        if delta.prompt_logprobs is not None and self.prompt_logprobs is None:
            self.prompt_logprobs = delta.prompt_logprobs
        if delta.finished:
            self.prefills.append((delta.prompt_tokens, delta.cached_tokens))
        if self.chat.forced is not None:  # JSON for a forced call: shown whole at the end
            return ParsedDelta()
        return self._filtered(self.parser.feed(delta.text), first)

    @property
    def held(self) -> HeldCall | None:
        """An engine tool's call that ended the running generation, not run yet."""
        return self.parser.held

    def continue_after(self, held: HeldCall, status: str, exchange_ids: list[int]) -> str:
        """The held call was run: its generation ends right after the call, the tool
        exchange (`exchange_ids`: the message's end, the response, the next header) is
        appended, and the next generation starts after it. Returns the status line as
        the client is shown it."""
        if self.last is not None and not self.last.finished:  # aborted after the call
            self.prefills.append((self.last.prompt_tokens, self.last.cached_tokens))
        generation = self.output_ids[self.generation_start:]
        start = self.generation_start + len(
            ids_for_text(self.tokenizer, generation, self.engine_text[: held.start]))
        kept = ids_for_text(self.tokenizer, generation, self.engine_text[: held.end])
        self.output_ids = [*self.output_ids[: self.generation_start], *kept, *exchange_ids]
        self.tool_spans.append(Span(start, len(self.output_ids), TOOL_KIND))
        self.generation_start = len(self.output_ids)
        self.engine_text = ""
        self.inserted += len(exchange_ids)
        self.engine_calls += 1
        self.parser.next_generation()
        shown = self.shown_text
        line = ("\n" if shown and not shown.endswith("\n") else "") + status + "\n"
        self._shown("status", line)
        return line

    def finish(self) -> ParsedDelta:
        if self.chat.forced is not None:
            return self._finish_forced()
        rest = self._filtered(self.parser.finish(), len(self.output_ids))
        suffix = self.memory_filter.finish(len(self.output_ids))
        if suffix:
            self._shown("status", suffix)
        rest.content += suffix
        stopped_by_string = self.last is not None and isinstance(self.last.stop_reason, str)
        # A stop string's token holds text the client never saw: the record ends where
        # the client's text ends.
        self._record(self.engine_text if stopped_by_string else None)
        return rest

    def _finish_forced(self) -> ParsedDelta:
        """A forced tool choice's JSON becomes the calls (or, cut short, plain text); the
        record holds the calls as the chat template renders them, as a next turn that
        sends them back renders them."""
        chat = self.chat
        calls = chat.forced.calls(self.engine_text)
        if not calls:
            rest = self._filtered(ParsedDelta(content=self.engine_text), 0)
            self._record()
            return rest
        self.parser.tool_calls.extend(calls)
        rendered = assistant_calls_text(self.tokenizer, [(c.name, c.arguments) for c in calls],
                                        chat.enable_thinking)
        self.output_ids = self.tokenizer.encode(rendered, add_special_tokens=False)
        self._record()
        return ParsedDelta(tool_calls=calls)

    def stopped(self) -> None:
        """The client left mid-answer: record what it was shown (a later turn may send
        it back), and have the writer look at the session."""
        held = len(self.parser.held_text) + len(self.memory_filter.held_text)
        if self.parser.held is not None:
            held = len(self.engine_text) - self.parser.held.start
        if self.chat.forced is not None:  # nothing of a forced call was shown
            held = len(self.engine_text)
        if self.output_ids:
            self._record(self.engine_text[: len(self.engine_text) - held], interrupted=True)
        elif self.chat.records:  # nothing to record; the writer looks at the session
            self.services.record_turn(TurnOutcome(self.chat.memory, self.chat.completion_id,
                                                  recorded=False, gave_up=True))
            if self.chat.on_recorded is not None:  # the user's words stay
                self._hand_over(interrupted=True)

    def _filtered(self, parsed: ParsedDelta, first: int) -> ParsedDelta:
        self.reasoning += parsed.reasoning
        if parsed.content:
            parsed.content = self.memory_filter.feed(parsed.content, first, len(self.output_ids))
            if parsed.content:
                self._shown("text", parsed.content)
        return parsed

    def _shown(self, kind: str, text: str) -> None:
        """Keep what the client was shown, a run of one kind as one segment."""
        if self.segments and self.segments[-1][0] == kind:
            self.segments[-1] = (kind, self.segments[-1][1] + text)
        else:
            self.segments.append((kind, text))

    def shown_logprobs(self, final: bool = False) -> list[dict]:
        """The log-probabilities of tokens the client has been shown since the last call,
        in vLLM's chat format; tokens of held-back blocks and engine-tool exchanges carry
        none. While text is held (a block, a tag, a call may be starting), they wait."""
        holding = self.parser.held_text or self.memory_filter.held_text
        if not self.pending_logprobs or (holding and not final):
            return []
        hidden = [(h.start, h.end) for h in self.memory_filter.hidden]
        hidden += [(s.start, s.end) for s in self.tool_spans]
        if self.parser.held is not None:  # an engine call not run yet: from its start on
            before = ids_for_text(self.tokenizer, self.output_ids[self.generation_start:],
                                  self.engine_text[: self.parser.held.start])
            hidden.append((self.generation_start + len(before), len(self.output_ids)))
        shown = [lp for at, lp in self.pending_logprobs
                 if not any(start <= at < end for start, end in hidden)]
        self.pending_logprobs = []
        return [chat_logprob(lp, self.chat.tokens_as_ids) for lp in shown]

    # -- what the client was shown ------------------------------------------------------------
    @property
    def shown_text(self) -> str:
        return "".join(text for _, text in self.segments)

    @property
    def client_calls(self) -> list[ToolCall]:
        return self.parser.tool_calls

    # -- recording ------------------------------------------------------------------------------
    def _record(self, shown_text: str | None = None, interrupted: bool = False) -> None:
        """The turn to memory, in its one call up (`MemoryServices.record_turn`): the
        prompt and the output ids, which end where the client's text ends when
        `shown_text` (the running generation's engine text it saw) is given; with
        `interrupted`, the client left and the writer looks at the session."""
        chat = self.chat
        if not chat.records:  # choice 1.. of n, or a prompt the client ended: no record
            return
        output = self.output_ids
        if shown_text is not None:
            generation = output[self.generation_start:]
            output = [*output[: self.generation_start],
                      *ids_for_text(self.tokenizer, generation, shown_text)]
        calls = [(c.name, c.arguments) for c in self.client_calls]
        shown = self.shown_text
        offset = len(chat.prompt_ids)
        blocks = [Span(offset + h.start, offset + h.end, "block", h.note_ids)
                  for h in self.memory_filter.hidden if h.end <= len(output)]
        tools = [Span(offset + s.start, offset + s.end, s.kind) for s in self.tool_spans
                 if s.end <= len(output)]
        self.services.record_turn(TurnOutcome(
            chat.memory, chat.completion_id,
            messages=(*chat.visible, VisibleMessage.of("assistant", shown, calls)),
            ids=(*chat.prompt_ids, *output),
            spans=(*chat.spans, *sorted([*blocks, *tools], key=lambda s: s.start)),
            ended_cleanly=bool(output) and output[-1] == self.end_of_turn,
            shown=shown, written=self.memory_filter.visible_text,
            ledger_kept=chat.ledger_kept, hidden=self._added(),
            shared_version=chat.hidden.version, shared_empty=chat.hidden.shared_empty,
            head_checkpointed=chat.head_checkpointed,
            blocks_written=bool(self.memory_filter.hidden),
            new_tokens=len(chat.prompt_ids) - chat.replayed_tokens + len(self.output_ids),
            gave_up=interrupted))
        self._hand_over(interrupted)

    def _added(self) -> tuple[Tail, ...]:
        """What this turn hid: the shared context and the tails after its new messages."""
        return tuple(t for t in (self.chat.hidden.head, *self.chat.hidden.tails) if t)

    def _hand_over(self, interrupted: bool) -> None:
        """The turn to `on_recorded` (which must not wait on a disk: it runs here)."""
        if self.chat.on_recorded is None:
            return
        turn = RecordedTurn(
            segments=list(self.segments), reasoning=self.reasoning,
            tool_calls=[(c.id, c.name, c.arguments) for c in self.client_calls],
            hidden=list(self._added()), interrupted=interrupted)
        self.chat.on_recorded(turn)

    # -- the response's fields ---------------------------------------------------------------------
    @property
    def finish_reason(self) -> str:
        if self.client_calls:
            return self.chat.forced.finish_reason if self.chat.forced else "tool_calls"
        if self.out_of_room:
            return "length"
        reason = self.last.finish_reason if self.last else None
        return reason if reason in ("stop", "length") else "stop"

    def usage(self) -> dict:
        """Prompt tokens: what the model read that it did not write (the prompt, the tool
        responses); cached: those of them not prefilled by any of the answer's
        generations (a generation after a tool call prefills its response, and the last
        partial block of what came before)."""
        prompt_tokens = len(self.chat.prompt_ids) + self.inserted
        prefilled = sum(prompt - cached for prompt, cached in self.prefills)
        if not self.prefills and self.last is not None:
            prefilled = self.last.prompt_tokens - self.last.cached_tokens
        return {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": self.generated,
            "total_tokens": prompt_tokens + self.generated,
            "prompt_tokens_details": {
                "cached_tokens": max(0, prompt_tokens - prefilled) if self.last else 0},
        }
