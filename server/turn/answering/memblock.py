"""The memory stream filter: holds `<tandem_memory>` blocks back from the client.

It sits on the answer's *content* (reasoning is left alone): text passes through, a block
is held until it closes and then handed to the notes store. A stored block never reaches
the client; after the answer, one status line per stored note does. A block that is not
taken (unclosed, too long, past the fourth, malformed, or refused by the store) goes out
as the text it was. The token range each held block occupied is kept as a hidden span.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from conductor.memory.context import BlockAction, MemoryContext, status_line
from conductor.memory.types import (
    Block,
    BlockRefusal,
    BlockScanner,
    NoteStore,
    Reason,
    TextPiece,
    parse_block,
    write_block,
)

log = logging.getLogger("tandem.memory")


@dataclass(frozen=True)
class HiddenBlock:
    start: int  # output-token offsets, end exclusive
    end: int
    note_ids: tuple[str, ...]


@dataclass
class MemoryFilter:
    action: BlockAction
    context: MemoryContext
    store: NoteStore | None
    request_id: str
    _scanner: BlockScanner = field(default_factory=BlockScanner)
    _hold_from: int | None = None
    visible: list[str] = field(default_factory=list)  # what the client was shown, in order
    status_lines: list[str] = field(default_factory=list)
    hidden: list[HiddenBlock] = field(default_factory=list)
    status_suffix: str = ""  # what finish() added after the answer: the status lines

    def feed(self, text: str, first_token: int, end_token: int) -> str:
        """Content text of output tokens [first_token, end_token) -> what to show now."""
        if self.action == "pass":
            self.visible.append(text)
            return text
        if not self._scanner.holding:
            self._hold_from = first_token
        shown = self._handle(self._scanner.feed(text), end_token)
        if not self._scanner.holding:
            self._hold_from = None
        return shown

    def finish(self, end_token: int) -> str:
        """End of the answer: anything still held goes out as text, then the status lines."""
        shown = self._handle(self._scanner.finish(), end_token)
        if self.status_lines:
            lines = "\n".join(self.status_lines)
            self.status_suffix = ("\n\n" if self.visible_text.strip() else "") + lines
            shown += self.status_suffix
        return shown

    def _handle(self, events: list[TextPiece | Block], end_token: int) -> str:
        shown = []
        for event in events:
            if isinstance(event, TextPiece):
                shown.append(event.text)
                continue
            taken, note_ids = self._take(event)
            if taken:
                start = self._hold_from if self._hold_from is not None else end_token
                self.hidden.append(HiddenBlock(start, end_token, note_ids))
            else:
                shown.append(event.raw)
        text = "".join(shown)
        self.visible.append(text)
        return text

    def _take(self, block: Block) -> tuple[bool, tuple[str, ...]]:
        """Store (or drop) a closed block; False when it must go out as text."""
        if self.action == "drop":
            return True, ()
        assert self.store is not None
        request = parse_block(block.raw)
        if isinstance(request, BlockRefusal):
            self.store.journal.append(op="block", ok=False, reason=request.reason,
                                      user=self.store.user, session=self.context.session,
                                      request_id=self.request_id)
            return False, ()
        ctx = self.context
        result = write_block(self.store, request, source="inline", session=ctx.session,
                             project=ctx.project, has_user_message=ctx.has_user_message)
        if not result.ok:
            if result.reason == Reason.IO_ERROR:  # disk full, read-only: say so; the
                # block goes out as text, so what the model meant to keep is not lost
                self.status_lines.append(status_line(
                    "not remembered", f"{request.title or 'a note'} ({result.detail})"))
            return False, ()  # the store journaled why
        if result.note is not None:
            if request.op == "archive" and not result.kept_live:
                verb = "archived"
            elif result.revised_existing or request.op == "update":
                verb = "updated"  # a note changed; no new one appeared
            else:
                verb = "remembered"
            self.status_lines.append(status_line(verb, result.note.title))
            return True, (result.note.id,)
        return True, ()

    @property
    def visible_text(self) -> str:
        """The answer's text as the model wrote it, less the blocks held back."""
        return "".join(self.visible)

    @property
    def held_text(self) -> str:
        """Text held back right now (a block, or what may start one): not yet shown."""
        return self._scanner.held if self.action != "pass" else ""
