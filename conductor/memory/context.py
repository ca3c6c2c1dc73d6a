"""What memory does for one request (`MemoryContext`), and which conversation it is: a
session id derived from what stays the same for the whole conversation when the client
names none."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Literal

from conductor.hidden.prewarm import ContextGroup
from conductor.ledger.records import VisibleMessage

BlockAction = Literal["store", "drop", "pass"]


def status_line(verb: str, title: str) -> str:
    """The line an answer shows for what memory did (a note written, a command carried out)."""
    return f"› {verb}: {title}"


@dataclass(frozen=True)
class MemoryContext:
    """What memory does for one request."""

    user: str | None  # None: a relayed request without a user; memory does nothing
    session: str
    project: str | None
    mode: str  # the profile's: off, shadow, on
    header: str | None  # the request's X-Tandem-Memory: off, read or None
    has_user_message: bool
    derived: bool = False  # the session id was derived from the messages (no header)

    @property
    def off_reason(self) -> str | None:
        if self.user is None:
            return "relayed_without_user"
        if self.header == "off":
            return "header_off"
        if self.mode == "off":
            return "profile_off"
        return None

    @property
    def block_action(self) -> BlockAction:
        if self.off_reason is not None:
            return "pass"  # memory is off: a block is just text
        if self.header == "read":
            return "drop"  # reads only: a block the model writes anyway is not stored
        return "store"

    @property
    def shows_card(self) -> bool:
        return self.off_reason is None and self.header != "read"

    @property
    def writes(self) -> bool:
        """Notes may be written for this request (inline blocks, and later the writer)."""
        return self.block_action == "store"

    @property
    def reads(self) -> bool:
        return self.off_reason is None and self.mode == "on"

    def context_group(self) -> ContextGroup | None:
        """Who shares this request's shared memory context; None when memory is off."""
        if self.user is None or self.off_reason is not None:
            return None
        return ContextGroup(self.user, self.project, self.shows_card, self.reads)


def derive_session(user: str | None, project: str | None,
                   messages: Sequence[VisibleMessage]) -> str:
    """A conversation's id, when the client sends none: the user, the project and the
    conversation's opening (see `conversation_opening`). Later messages and the tools
    offered are left out: they change from turn to turn.

    The first answer is in it so that conversations with the same opening ("hi", a chat
    app's canned greeting) are told apart from their second turn on; a first turn has no
    answer yet, so its record is filed under the id its answer makes
    (`session_after_answer`), which is what the second turn derives."""
    digest = hashlib.blake2b(json.dumps([user or "", project or ""]).encode(),
                             digest_size=8)
    for message in conversation_opening(messages):
        digest.update(message.digest())
    return "s-" + digest.hexdigest()


def conversation_opening(messages: Sequence[VisibleMessage]) -> list[VisibleMessage]:
    """The system (and developer) messages and anything else up to the first user message,
    that message, and the first answer after it once there is one."""
    opening: list[VisibleMessage] = []
    asked = False
    for message in messages:
        if message.role == "tools":  # the tool definitions' pseudo-message
            continue
        if not asked:
            opening.append(message)
            asked = message.role == "user"
        elif message.role == "assistant":
            opening.append(message)
            break
    return opening


def session_after_answer(memory: MemoryContext, messages: Sequence[VisibleMessage]) -> str:
    """The session a turn's record is filed under: a derived session whose first turn this
    was is named by its answer too (`messages` end with it); any other is the request's."""
    if not memory.derived:
        return memory.session
    return derive_session(memory.user, memory.project, messages)



def as_the_ledger_knows(messages: Sequence[VisibleMessage],
                        as_shown: Callable[[str, bytes], str]) -> tuple[VisibleMessage, ...]:
    """The messages as the ledger files them: each answer in the form its client was
    shown it, status lines included (`as_shown(text, place)`: ShownAnswers.as_shown for
    the user, `place` the digest of the conversation before the answer). A client that
    sends an answer back without the lines (what the model wrote) holds the same
    conversation: without this it derived another session and missed the record, or
    matched it only up to that answer, which was then rendered afresh without its hidden
    block (and, under Qwen3's template, without the empty think block before it): all of
    the answer's tokens out of the backend's cache on the next turn."""
    out: list[VisibleMessage] = []
    before = _digest()
    for message in messages:
        if message.role == "assistant" and message.content.strip():
            message = replace(message, content=as_shown(message.content, before.digest()))
        out.append(message)
        if message.role != "tools":  # the tool definitions change beside the conversation
            before.update(message.digest())
    return tuple(out)


def conversation_digest(messages: Sequence[VisibleMessage]) -> bytes:
    """An answer's place: the digest of the messages before it (the tools' pseudo-message
    left out), as `as_the_ledger_knows` computes it at each answer."""
    digest = _digest()
    for message in messages:
        if message.role != "tools":
            digest.update(message.digest())
    return digest.digest()


def _digest():
    return hashlib.blake2b(digest_size=16)
