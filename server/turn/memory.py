"""Who a request is for and what memory may do with it: user, session, mode, token, store."""

from __future__ import annotations

import getpass
import hashlib
import json
import logging
import os
import re
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from conductor.hidden.prefetch import PrefetchDue, PrefetchLimits
from conductor.hidden.prewarm import ContextGroup, PrewarmHeads
from conductor.hidden.shared_context import (
    SharedContext,
    build_shared_context,
    shared_notes,
)
from conductor.hidden.tail_notes import DEFAULT_SHOWN, NotesShown
from conductor.layers.history import QuarantineReport
from conductor.layers.user_layers import UserLayers
from conductor.ledger.files import LedgerFiles, LedgerSaver, ShownAnswerFiles
from conductor.ledger.records import Ledger, VisibleMessage
from conductor.ledger.shown_answers import ShownAnswers
from conductor.ledger.stored_responses import ResponseStore
from conductor.notes import NoteStore
from conductor.storage.erase import erase_user
from conductor.storage.journal import Journal
from conductor.storage.paths import valid_session, valid_user
from conductor.writing.triggers import SESSION_IDLE_S, WriterTriggers
from server.access.session_tokens import SessionTokens
from server.http.schema import ChatCompletionRequest

log = logging.getLogger("tandem.memory")

MEMORY_HEADER = "x-tandem-memory"
USER_HEADER = "x-tandem-user"
SESSION_HEADER = "x-tandem-session"
PROJECT_HEADER = "x-tandem-project"
TOKEN_HEADER = "x-tandem-memory-token"

BlockAction = Literal["store", "drop", "pass"]

def status_line(verb: str, title: str) -> str:
    return f"› {verb}: {title}"


@dataclass(frozen=True)
class MemorySettings:
    """Server-wide memory settings (the CLI and environment set them)."""

    user_name: str = field(default_factory=lambda: os.environ.get("TANDEM_USER")
                           or _os_user())
    trusted_proxies: frozenset[str] = frozenset(
        a.strip() for a in os.environ.get("TANDEM_TRUSTED_PROXIES", "").split(",") if a.strip())
    # The hour (local time) of the daily nightly job: INDEX.md, archive expiry, staleness.
    nightly_hour: int = field(default_factory=lambda: int(
        os.environ.get("TANDEM_NIGHTLY_HOUR") or 3))


def _os_user() -> str:
    try:
        name = getpass.getuser()
    except Exception:  # no passwd entry (containers)
        return "local"
    return re.sub(r"[^a-z0-9_-]", "-", name.lower()) or "local"


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


def request_messages(request: ChatCompletionRequest) -> list[VisibleMessage]:
    """The request's messages in the ledger's terms (as `prompt.visible_messages`, without
    the tools): what a derived session id is made of."""
    out = []
    for message in request.messages:
        role = "system" if message.role == "developer" else message.role
        try:
            text = message.text()
        except ValueError:  # non-text parts are refused later, with a clear error
            text = ""
        calls = [(c.function.name, c.function.arguments) for c in message.tool_calls or ()]
        out.append(VisibleMessage.of(role, text, calls))
    return out


def session_after_answer(memory: MemoryContext, messages: Sequence[VisibleMessage]) -> str:
    """The session a turn's record is filed under: a derived session whose first turn this
    was is named by its answer too (`messages` end with it); any other is the request's."""
    if not memory.derived:
        return memory.session
    return derive_session(memory.user, memory.project, messages)


def request_user(headers, peer: str | None, settings: MemorySettings,
                 key_user: str | None = None) -> str | None:
    """Whose memory a request is: the user a trusted proxy relays (None: nobody's), else
    the user its API key names, else the engine's own user."""
    relayed = peer is not None and peer in settings.trusted_proxies
    user = (headers.get(USER_HEADER) or None) if relayed else key_user or settings.user_name
    if user is not None and not valid_user(user):
        return None  # not a name the store can file under
    # One user whatever the case: `Alice` and `alice` name one folder on a case-insensitive
    # filesystem, so they are one user everywhere.
    return user.lower() if user is not None else None


def resolve_context(request: ChatCompletionRequest, headers, peer: str | None, mode: str,
                    settings: MemorySettings, key_user: str | None = None,
                    session: str | None = None) -> MemoryContext:
    user = request_user(headers, peer, settings, key_user)
    header = (headers.get(MEMORY_HEADER) or "").strip().lower() or None
    project = headers.get(PROJECT_HEADER) or None
    session = session or headers.get(SESSION_HEADER)
    derived = not session
    if not session:
        session = derive_session(user, project, request_messages(request))
    if not valid_session(session):  # any header value is accepted, filed under its hash
        session = "h-" + hashlib.blake2b(session.encode(), digest_size=8).hexdigest()
    last_role = request.messages[-1].role
    return MemoryContext(user=user, session=session, project=project, mode=mode,
                         header=header, has_user_message=last_role == "user", derived=derived)


@dataclass
class MemoryServices:
    """The server's memory state: stores per user, session tokens, the ledger."""

    home: Path
    settings: MemorySettings = field(default_factory=MemorySettings)
    ledger: Ledger = field(default_factory=Ledger)
    notes_shown: NotesShown = DEFAULT_SHOWN  # the index's budget, the matches' size and format
    # Prefetch (server/background/prefetch.py): the sessions due, and how much a turn
    prefetch_due: PrefetchDue = field(default_factory=PrefetchDue)
    prefetch_limits: PrefetchLimits = PrefetchLimits()
    prewarm: PrewarmHeads = field(default_factory=PrewarmHeads)
    shown: ShownAnswers = field(default_factory=ShownAnswers)  # answers with status lines
    triggers: WriterTriggers = field(default_factory=lambda: WriterTriggers(
        idle_s=float(os.environ.get("TANDEM_WRITER_IDLE_S") or SESSION_IDLE_S)))
    # Told the user whose memory files changed (a note written, a job run): the search
    # index syncs in idle time.
    on_change: Callable[[str | None], None] = lambda user: None
    # What the server counts for /metrics (server.http.metrics.TandemMetrics); none by default.
    metrics: Any = None
    _stores: dict[str, NoteStore] = field(default_factory=dict)
    _layers: dict[str, UserLayers] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        # What a restart keeps: session tokens and the ledger's records (saved behind
        # by `ledger_saver`, started and stopped with the app).
        self.tokens = SessionTokens(self.root)
        ledger_files, shown_files = LedgerFiles(self.root), ShownAnswerFiles(self.root)
        ledger_files.load_into(self.ledger)
        shown_files.load_into(self.shown)
        self.responses = ResponseStore(self.root)  # the Responses API's stored responses
        self.ledger_saver = LedgerSaver(self.ledger, ledger_files, also=self.tokens.save,
                                        shown=(self.shown, shown_files))

    @property
    def root(self) -> Path:
        return self.home / "memory"

    def store(self, user: str) -> NoteStore:
        with self._lock:
            if user not in self._stores:
                store = NoteStore(self.root, user)
                if self.metrics is not None:
                    store.journal.on_append = self.metrics.journal_entry
                self._stores[user] = store
            return self._stores[user]

    def layers(self, user: str) -> UserLayers:
        """The user's memory layers (core, working, semantic, history)."""
        with self._lock:
            if user not in self._layers:
                self._layers[user] = UserLayers(self.root, user, self._quarantine_report(user))
            return self._layers[user]

    @property
    def journal(self) -> Journal:
        """The journal every user's entries go to (each names its user)."""
        return Journal(self.root / "journal.jsonl")

    def delete_user(self, user: str, via: str, also: dict[str, int]) -> dict[str, int]:
        """The user's delete, once their keys are revoked and the search index let go:
        their session tokens revoked and their prefix-cache salt retired (a user made
        again under the name starts afresh), what this process holds of them dropped,
        then every file of theirs removed and one journal entry of it written, with
        `also`'s counts (`conductor.storage.erase`). Returns what went, by kind."""
        tokens = self.tokens.forget_user(user)
        records = self.ledger.forget_user(user)
        shown = self.shown.forget_user(user)
        self.triggers.forget_user(user)
        self.prefetch_due.forget_user(user)
        self.prewarm.forget_user(user)
        with self._lock:
            self._stores.pop(user, None)
            self._layers.pop(user, None)
        self.ledger_saver.save_now()  # a save in progress ends, the dropped files go
        return erase_user(self.root, user, via=via, responses=self.responses, also={
            **also, "session_tokens": tokens, "records": records, "shown_answers": shown})

    def _quarantine_report(self, user: str) -> QuarantineReport:
        journal = self.journal

        def report(name: str, reason: str) -> None:
            log.warning("history turn %s set aside: %s", name, reason)
            try:  # file names and reasons only: a turn's text never reaches the journal
                journal.append(op="history_quarantine", user=user, id=name[:200],
                               reason=reason[:200].replace("\n", " "))
            except (OSError, ValueError):
                log.warning("journal not written for a set-aside turn")
        return report

    def token_for(self, user: str, session: str) -> str:
        """The session's token for the memory routes: the same one after a restart."""
        return self.tokens.token_for(user, session)

    def cache_salt(self, user: str | None) -> str:
        """The prefix-cache salt of `user`'s requests, client and background alike (a
        relayed request that names nobody has one of its own)."""
        return self.tokens.cache_salt(user or "-relayed-")

    def resolve_token(self, token: str | None) -> tuple[str, str] | None:
        return self.tokens.resolve(token)

    def shared_context(self, user: str, project: str | None, card: bool, reads: bool,
                       count_tokens) -> SharedContext | None:
        """The card (when `card`) and the index of the user's and project's notes (when
        `reads`), as every session of this user and project gets them now."""
        store = self.store(user)
        with store.one_scan():
            notes = shared_notes(store, project) if reads else None
            return build_shared_context(card, notes, count_tokens,
                                        self.notes_shown.index_budget)
