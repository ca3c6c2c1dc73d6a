"""The server's memory state, one object: stores per user, session tokens, the ledger,
the Responses store and the idle-time services' queues (`IdleWork`); and a chat turn's
flat calls, `begin_turn` and `admit_turn` on its way to the engine and
`record_turn` on its way back (their plain data: conductor/memory/turn.py)."""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import InitVar, dataclass, field, replace
from pathlib import Path
from typing import Any

from conductor.hidden.prefetch import PrefetchLimits, goes_on
from conductor.hidden.prewarm import SEED_SESSIONS
from conductor.hidden.shared_context import (
    SHARED_KIND,
    SharedContext,
    build_shared_context,
    shared_notes,
)
from conductor.hidden.tail_notes import DEFAULT_SHOWN, NotesShown
from conductor.layers.history import journaled_quarantine
from conductor.layers.user_layers import UserLayers
from conductor.ledger.files import LedgerFiles, LedgerSaver, ShownAnswerFiles
from conductor.ledger.records import MAX_TOKENS, Ledger, Match, Record, VisibleMessage
from conductor.ledger.shown_answers import ShownAnswers
from conductor.ledger.stored_responses import ResponseStore
from conductor.memory.context import (
    MemoryContext,
    as_the_ledger_knows,
    conversation_digest,
    derive_session,
    session_after_answer,
)
from conductor.memory.erase import drop_indexes_of_gone_users, erase_user
from conductor.memory.hiding import (
    HiddenContext,
    Replayed,
    choose_hidden,
    drop_note_memos,
    injections_to_record,
    note_miss,
    record_injections,
)
from conductor.memory.idle_work import IdleWork
from conductor.memory.lease import LeaseKeeper
from conductor.memory.session_tokens import SessionTokens
from conductor.memory.settings import MemorySettings
from conductor.memory.turn import LaidTurn, TurnFacts, TurnMemory, TurnOutcome, TurnPlan
from conductor.memory.turn_command import turn_command
from conductor.notes import NoteStore
from conductor.storage.journal import Journal
from conductor.storage.recovery import Recovery, recover

log = logging.getLogger("tandem.memory")


@dataclass
class MemoryServices:
    """The server's memory state: stores per user, session tokens, the ledger. Its parts
    are private; the server calls what `MemoryDoor` (interface.py) names."""

    home: Path
    settings: MemorySettings = field(default_factory=MemorySettings)
    # The profile's memory section, as the parts below are made with it:
    ledger_max_tokens: InitVar[int] = MAX_TOKENS  # memory.ledger_max_tokens
    notes_shown: NotesShown = DEFAULT_SHOWN  # the index's budget, the matches' size and format
    prefetch_limits: InitVar[PrefetchLimits] = PrefetchLimits()  # kept in `idle`
    # The profile's memory.command_recogniser: "rules", or "learned" (the rules, then a
    # classifier over n-grams where they find nothing: conductor/writing/command_classifier)
    command_recogniser: str = "rules"
    # Told the user whose memory files changed (a note written, a job run): the search
    # index syncs in idle time.
    on_change: Callable[[str | None], None] = lambda user: None
    # What the server counts for /metrics (server.http.metrics.TandemMetrics); none by default.
    metrics: Any = None
    # The served model's tokenizer (`use_tokenizer`, once the engine is ready): what the
    # hiding decision counts a part's tokens with, and reads replayed notes back with.
    _count_tokens: Callable[[str], int] | None = None
    _decode: Callable[[list[int]], str] | None = None
    _shown: ShownAnswers = field(default_factory=ShownAnswers)  # answers with status lines
    _stores: dict[str, NoteStore] = field(default_factory=dict)
    _layers: dict[str, UserLayers] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self, ledger_max_tokens: int, prefetch_limits: PrefetchLimits) -> None:
        # What a restart keeps: session tokens and the ledger's records (saved behind
        # by `ledger_saver`, started and stopped with the app).
        # With replicas, this replica's own state stays in its home; the notes, layers
        # and journal are on the shared root; the search indexes, derived from them,
        # are this replica's (embedded Qdrant and tantivy lock their folder per process).
        local = self.home / "memory"
        if self.settings.shared_memory is not None:
            os.environ.setdefault("TANDEM_INDEX_DIR", str(local / "replica-index"))
        self._tokens = SessionTokens(local)
        self._ledger = Ledger(max_tokens=ledger_max_tokens)
        ledger_files, shown_files = LedgerFiles(local), ShownAnswerFiles(local)
        ledger_files.load_into(self._ledger)
        shown_files.load_into(self._shown)
        self._responses = ResponseStore(local)
        # the queues a turn fills and the idle-time services empty
        self.idle = IdleWork(prefetch_limits=prefetch_limits)
        self.leases: LeaseKeeper | None = None
        if self.settings.etcd_url:
            from conductor.memory.etcd_leases import EtcdLeases

            self.leases = LeaseKeeper(EtcdLeases(self.settings.etcd_url),
                                      self.settings.replica, self.settings.lease_ttl_s,
                                      self.settings.lease_idle_s)
        self._saver = LedgerSaver(self._ledger, ledger_files, also=self._tokens.save,
                                  shown=(self._shown, shown_files))

    # -- the ledger's records and the Responses store, as the routes and idle time read them
    def latest_record(self, user: str, session: str) -> Record | None:
        """The session's newest record: its prompt and answer, id for id."""
        return self._ledger.latest(user, session)

    def records(self, user: str, session: str | None = None) -> list[Record]:
        """The session's records, oldest first; without `session`, all of `user`'s."""
        if session is None:
            return self._ledger.user_records(user)
        return self._ledger.records(user, session)

    def latest_in(self, user: str, session: str, project: str | None) -> Record | None:
        """The session's newest record made in `project` (a miss compares with it)."""
        return self._ledger.latest_in(user, session, project)

    def sessions_of(self, user: str) -> list[str]:
        """`user`'s sessions with records, most recently used first."""
        return self._ledger.sessions_of(user)

    def extend_record(self, record: Record, longer: Record) -> bool:
        """`longer` (the record with a prefill's ids after it) in `record`'s place, while
        `record` is still its session's newest; False when a turn came meanwhile."""
        if self._ledger.latest(record.user, record.session) is not record:
            return False
        self._ledger.record(longer)
        return True

    def serve_model(self, fingerprint: str, hybrid: bool) -> int:
        """The engine's model, once ready: other models' saved records dropped, how many;
        `hybrid`: each turn's record is prefilled after it (one state a request)."""
        self.idle.records_due.on = hybrid
        return self._ledger.serve_fingerprint(fingerprint)

    async def keep_saved(self, busy: Callable[[], bool]) -> None:
        """Save the ledger, session tokens and shown answers behind, in `busy`'s gaps."""
        self._saver.busy = busy
        await self._saver.run()

    def save_now(self) -> None:
        self._saver.save_now()  # what changed, now (at shutdown)

    @property
    def responses(self) -> ResponseStore:  # the Responses API's stored responses
        return self._responses

    @property
    def root(self) -> Path:
        """The notes root: the shared one with replicas, else ``$TANDEM_HOME/memory``."""
        return self.settings.shared_memory or self.home / "memory"

    def store(self, user: str) -> NoteStore:
        with self._lock:
            if user not in self._stores:
                self._arrives(user)
                store = NoteStore(self.root, user)
                if self.leases is not None:  # every write carries the user's token
                    store.fence = functools.partial(self.leases.token, user)
                if self.metrics is not None:
                    store.journal.on_append = self.metrics.journal_entry
                self._stores[user] = store
            return self._stores[user]

    def layers(self, user: str) -> UserLayers:
        """The user's memory layers (core, working, semantic, history)."""
        with self._lock:
            if user not in self._layers:
                self._arrives(user)
                layers = UserLayers(self.root, user, journaled_quarantine(self.journal, user))
                if self.leases is not None:  # history turns and layer files: fenced too
                    layers.fence = functools.partial(self.leases.token, user)
                self._layers[user] = layers
            return self._layers[user]

    def _arrives(self, user: str) -> None:
        """Replicas: a user this process meets for the first time, whose files another
        replica deleted, leaves no index of theirs here (before their files are made
        again)."""
        if self.settings.shared_memory is not None:
            drop_indexes_of_gone_users(self.root, [user])

    def recover(self) -> Recovery:
        """What a start does after a crash (conductor/storage/recovery.py), and with
        replicas the indexes of users deleted meanwhile dropped; file work."""
        if self.settings.shared_memory is not None:
            drop_indexes_of_gone_users(self.root)
        return recover(self.root)

    @property
    def journal(self) -> Journal:
        """The journal every user's entries go to (each names its user)."""
        return Journal(self.root / "journal.jsonl")

    def delete_user(self, user: str, via: str, also: dict[str, int]) -> dict[str, int]:
        """The user's delete, once their keys are revoked and the search index let go:
        their session tokens revoked and their prefix-cache salt retired (a user made
        again under the name starts afresh), what this process holds of them dropped,
        then every file of theirs removed and one journal entry of it written, with
        `also`'s counts (`conductor.memory.erase`). Returns what went, by kind."""
        tokens = self._tokens.forget_user(user)
        records = self._ledger.forget_user(user)
        shown = self._shown.forget_user(user)
        self.idle.forget_user(user)
        with self._lock:
            self._stores.pop(user, None)
            self._layers.pop(user, None)
        drop_note_memos()
        self._saver.save_now()  # a save in progress ends, the dropped files go
        return erase_user(self.root, user, via=via, responses=self._responses, also={
            **also, "session_tokens": tokens, "records": records, "shown_answers": shown})

    def token_for(self, user: str, session: str) -> str:
        """The session's token for the memory routes: the same one after a restart."""
        return self._tokens.token_for(user, session)

    def cache_salt(self, user: str | None) -> str:
        """The prefix-cache salt of `user`'s requests, client and background alike (a
        relayed request that names nobody has one of its own)."""
        return self._tokens.cache_salt(user or "-relayed-")

    def resolve_token(self, token: str | None) -> tuple[str, str] | None:
        return self._tokens.resolve(token)

    def answers_shown(self, user: str | None) -> Callable[[str], str]:
        """`as_written` for the user's messages: an answer the client was shown with
        status lines, back to what the model wrote (what render_chat takes)."""
        return self._shown.for_user(user)

    def derived_session(self, user: str | None, project: str | None,
                        messages: Sequence[VisibleMessage]) -> str:
        """A conversation's id when the client sends none (`derive_session`), its answers
        as the ledger knows them: the same whether the client sends them back with the
        status lines or without."""
        return derive_session(user, project,
                              as_the_ledger_knows(messages, self._shown.for_shown(user)))

    def show_answer(self, user: str | None, shown: str, written: str) -> None:
        """An answer shown as `shown`, written by the model as `written`, made known (the
        continuous conversation's replayed answers, after a restart too)."""
        self._shown.remember(user, shown, written)

    def shared_context(self, user: str, project: str | None, card: bool, reads: bool,
                       count_tokens: Callable[[str], int]) -> SharedContext | None:
        """The card (when `card`) and the index of the user's and project's notes (when
        `reads`), as every session of this user and project gets them now."""
        store = self.store(user)
        with store.one_scan():  # listed (copied) only for an index to show
            notes = shared_notes(store, project) \
                if reads and self.notes_shown.index_budget > 0 else None
            return build_shared_context(card, notes, count_tokens,
                                        self.notes_shown.index_budget)

    # -- a chat turn: flat calls, as vLLM's scheduler is called (conductor/memory/turn.py) --
    def use_tokenizer(self, count_tokens: Callable[[str], int],
                      decode: Callable[[list[int]], str]) -> None:
        """The served model's tokenizer, handed over once when the engine is ready (as
        vLLM's scheduler is given its cache's shape at start), so that no turn passes a
        callable into memory."""
        self._count_tokens, self._decode = count_tokens, decode

    def begin_turn(self, facts: TurnFacts) -> TurnMemory:
        """A chat turn's first call down: what its layout reads of memory (the ledger's
        match, the shown answers, the matched record's deleted notes) and the hiding
        decision bound to this turn, which the server asks for each layout it tries
        (`TurnMemory.hidden(replay)`). `facts.memory` must be set."""
        memory = facts.memory
        assert memory is not None, "a turn's facts name its memory context"
        count_tokens, decode = self._count_tokens, self._decode
        assert count_tokens is not None and decode is not None, \
            "the engine's tokenizer is handed over when it is ready (use_tokenizer)"
        user = memory.user
        # an answer sent back without its status lines is the one the ledger holds
        visible = as_the_ledger_knows(facts.visible, self._shown.for_shown(user))
        match = self._ledger.find(user or "-relayed-", session_after_answer(memory, visible),
                                  list(visible), memory.project,
                                  bare=memory.off_reason is not None)
        if match is not None and facts.tools_message:  # the tools' pseudo-message
            match = replace(match, matched_messages=match.matched_messages - 1)

        def hidden(replay: Replayed | None) -> HiddenContext:
            # the replayed notes are read back (for their corrections) from the replay's ids
            return choose_hidden(self, memory, replay, facts, count_tokens,
                                 decode if replay is not None else None)

        return TurnMemory(
            match=match, as_written=self.answers_shown(user),
            deleted=self._deleted_notes(user, match), shows_shared=self._shows_shared(memory),
            hidden=hidden, facts=facts)

    def admit_turn(self, turn: TurnMemory, laid: LaidTurn) -> TurnPlan:
        """A chat turn's second call down, once its layout stands (the request is valid):
        a miss noted, a memory command carried out (LeaseBusy or LeaseUnavailable when
        another replica writes the user's memory), and the user's cache salt. Nothing
        of it when the turn is laid out to be counted only."""
        facts = turn.facts
        memory = facts.memory
        assert memory is not None, "a turn's facts name its memory context"
        command = None
        if not facts.counting:
            if laid.missed and memory.off_reason is None:
                note_miss(self, memory, list(as_the_ledger_knows(
                    laid.visible, self._shown.for_shown(memory.user))), self._count_tokens)
            # "remember that ...": carried out now, in the user's words (the request is valid)
            command = turn_command(memory, facts.command_text, facts.visible, self.store,
                                   self.leases, self.command_recogniser)
        return TurnPlan(command, self.cache_salt(memory.user))

    def _deleted_notes(self, user: str | None, match: Match | None) -> frozenset[str]:
        """The notes the matched record's hidden spans hold that are gone (deleted, not
        archived): a replay holding one is rendered afresh, without its text."""
        if match is None or user is None:
            return frozenset()
        note_ids = {i for span in match.record.spans for i in span.note_ids}
        return frozenset(self.store(user).missing(note_ids)) if note_ids else frozenset()

    def _shows_shared(self, memory: MemoryContext) -> bool:
        """Whether this request would get a shared context at all (the card, or an index):
        else a record without one is not worth a second, whole render."""
        if memory.off_reason is not None:
            return False
        return memory.shows_card or (memory.reads and self.notes_shown.index_budget > 0)

    def record_turn(self, outcome: TurnOutcome) -> None:
        """A chat turn's one call up, on the event loop, once it is answered or the client
        left: the shown answer, the ledger's record (and its idle-time prefill on a hybrid
        model), the prewarm's head, the notes injected (in a worker thread), the
        prefetch's and the writer's triggers."""
        memory = outcome.memory
        user, session = memory.user, memory.session
        if outcome.recorded:
            messages = as_the_ledger_knows(outcome.messages, self._shown.for_shown(user))
            self._shown.remember(user, outcome.shown, outcome.written,
                                 before=conversation_digest(messages[:-1]))
            session = session_after_answer(memory, messages)
            if outcome.ledger_kept:
                self._ledger.record(Record(
                    user=user or "-relayed-", session=session, project=memory.project,
                    bare=memory.off_reason is not None, messages=messages,
                    ids=outcome.ids, ended_cleanly=outcome.ended_cleanly,
                    spans=outcome.spans, shared_flags=None if memory.off_reason is not None
                    else (memory.shows_card, memory.reads), shared_empty=outcome.shared_empty))
                self.idle.records_due.turn_recorded(user or "-relayed-", session)
            self._note_head(outcome)
            if injections_to_record(memory, list(outcome.hidden)):
                asyncio.get_running_loop().run_in_executor(
                    None, record_injections, self, memory, list(outcome.hidden),
                    outcome.request_id)
            if outcome.blocks_written:  # blocks held back: notes may have been written
                self.on_change(user)
            if self.idle.prefetch_limits.after_turn and outcome.ledger_kept and memory.reads \
                    and user is not None \
                    and goes_on(memory.derived, [m.role for m in outcome.messages]):
                self.idle.prefetch_due.turn_recorded(user, session)
            if memory.writes:
                self.idle.triggers.turn_done(user, session, outcome.new_tokens)
        if outcome.gave_up and memory.writes:  # the writer looks at what was said
            self.idle.triggers.give_up(user, session)

    def seed_prewarm(self, mode: str) -> int:
        """At start, once the ledger holds only the served model's records: the prewarm's
        heads from the newest saved ones (`PrewarmHeads.seed`), so the first idle moment
        prefills their shared context and likely notes rather than the first session
        after the restart. `mode` is the profile's memory mode. Returns the heads."""
        if mode == "off":  # no session gets a shared context
            return 0
        return self.idle.prewarm.seed(self._ledger.newest(SEED_SESSIONS), reads=mode == "on")

    def _note_head(self, outcome: TurnOutcome) -> None:
        """The head and the shared context the turn ran are cached now: the prewarm keeps
        them current when the shared context changes."""
        group = outcome.memory.context_group()
        if outcome.shared_version is None or group is None:
            return
        shared = next((s for s in outcome.spans if s.kind == SHARED_KIND), None)
        if shared is not None:
            # not checkpointed: no version is cached, so the prewarm runs in idle time
            version = outcome.shared_version if outcome.head_checkpointed else ""
            self.idle.prewarm.seen(group, tuple(outcome.ids[: shared.start]), version)
