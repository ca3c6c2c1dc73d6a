"""Memory's front door as an interface: what the server may call on `MemoryServices`.

`MemoryDoor` names the calls and the few fields a server module that needs only the door
annotates with (the turn, the MCP tools, the routes that read and write a user's memory);
`create_app` builds the concrete `MemoryServices`, which satisfies it
(tests/test_memory_door.py holds every member to the same signature, so the two cannot
drift). The plain data that crosses the door is in `conductor.memory.turn` (a chat turn's)
and `conductor.memory.types` (the parts' own types).

Its parts (the ledger, the session tokens, the saver) are private; the idle-time services
(server/idle/) read the ledger's records through the calls below and take their work from
`idle` (conductor/memory/idle_work.py), the queues a turn fills."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from conductor.hidden.shared_context import SharedContext
    from conductor.hidden.tail_notes import NotesShown
    from conductor.layers.user_layers import UserLayers
    from conductor.ledger.records import Record, VisibleMessage
    from conductor.ledger.stored_responses import ResponseStore
    from conductor.memory.idle_work import IdleWork
    from conductor.memory.lease import LeaseKeeper
    from conductor.memory.settings import MemorySettings
    from conductor.memory.turn import LaidTurn, TurnFacts, TurnMemory, TurnOutcome, TurnPlan
    from conductor.notes import NoteStore
    from conductor.storage.journal import Journal
    from conductor.storage.recovery import Recovery


class MemoryDoor(Protocol):
    """What the server may ask of memory: a chat turn's three flat calls, a user's stores,
    the session tokens and cache salts, the shared context, a user's delete, the ledger's
    records and the idle time's queues."""

    settings: MemorySettings  # server-wide: who the engine's own user is, the proxies
    # What the server counts for /metrics (server.http.metrics.TandemMetrics), or None.
    metrics: Any
    # Told the user whose memory files changed: the search index syncs in idle time.
    on_change: Callable[[str | None], None]
    # Replicas: the keeper of this replica's user leases (None on one machine).
    leases: LeaseKeeper | None
    # The profile's memory.notes_shown: the index's budget, the matches' size and format
    notes_shown: NotesShown
    # The queues a turn fills and the idle-time services take their work from
    idle: IdleWork

    @property
    def root(self) -> Path:
        """The notes root: the shared one with replicas, else ``$TANDEM_HOME/memory``."""
        ...

    @property
    def journal(self) -> Journal:
        """The journal every user's entries go to (each names its user)."""
        ...

    def store(self, user: str) -> NoteStore:
        """The user's note store (one a process, fenced with replicas)."""
        ...

    def layers(self, user: str) -> UserLayers:
        """The user's memory layers (core, working, semantic, history)."""
        ...

    def recover(self) -> Recovery:
        """What a start does after a crash; file work."""
        ...

    def delete_user(self, user: str, via: str, also: dict[str, int]) -> dict[str, int]:
        """The user's delete, every file of theirs and what the process holds of them;
        what went, by kind."""
        ...

    def cache_salt(self, user: str | None) -> str:
        """The prefix-cache salt of `user`'s requests, client and background alike."""
        ...

    def resolve_token(self, token: str | None) -> tuple[str, str] | None:
        """The (user, session) a memory token stands for, or None."""
        ...

    def shared_context(self, user: str, project: str | None, card: bool, reads: bool,
                       count_tokens: Callable[[str], int]) -> SharedContext | None:
        """The card and the index of the user's and project's notes, as every session of
        this user and project gets them now."""
        ...

    def answers_shown(self, user: str | None) -> Callable[[str], str]:
        """`as_written` for the user's messages: an answer the client was shown with
        status lines, back to what the model wrote (what render_chat takes)."""
        ...

    def derived_session(self, user: str | None, project: str | None,
                        messages: Sequence[VisibleMessage]) -> str:
        """A conversation's id when the client sends none, its answers as the ledger
        knows them (with their status lines or without)."""
        ...

    def show_answer(self, user: str | None, shown: str, written: str) -> None:
        """An answer shown as `shown`, written by the model as `written`, made known."""
        ...

    def use_tokenizer(self, count_tokens: Callable[[str], int],
                      decode: Callable[[list[int]], str]) -> None:
        """The served model's tokenizer, handed over once when the engine is ready."""
        ...

    def begin_turn(self, facts: TurnFacts) -> TurnMemory:
        """A chat turn's first call down: what its layout reads of memory and the hiding
        decision bound to the turn."""
        ...

    def admit_turn(self, turn: TurnMemory, laid: LaidTurn) -> TurnPlan:
        """A chat turn's second call down, once its layout stands: a miss noted, a memory
        command carried out, the user's cache salt."""
        ...

    def record_turn(self, outcome: TurnOutcome) -> None:
        """A chat turn's one call up, on the event loop, once it is answered."""
        ...

    def seed_prewarm(self, mode: str) -> int:
        """At start: the prewarm's heads from the newest saved records; how many."""
        ...

    # -- the ledger's records, as the routes and the idle time read them; its saving
    def latest_record(self, user: str, session: str) -> Record | None:
        """The session's newest record: its prompt and answer, id for id."""
        ...

    def records(self, user: str, session: str | None = None) -> list[Record]:
        """The session's records, oldest first; without `session`, all of `user`'s."""
        ...

    def sessions_of(self, user: str) -> list[str]:
        """`user`'s sessions with records, most recently used first."""
        ...

    def extend_record(self, record: Record, longer: Record) -> bool:
        """`longer` in `record`'s place while `record` is still its session's newest."""
        ...

    def serve_model(self, fingerprint: str, hybrid: bool) -> int:
        """The engine's model, once ready: other models' saved records dropped, how many."""
        ...

    async def keep_saved(self, busy: Callable[[], bool]) -> None:
        """Save the ledger, session tokens and shown answers behind, in `busy`'s gaps."""
        ...

    def save_now(self) -> None:
        """Save what changed now (at shutdown)."""
        ...

    @property
    def responses(self) -> ResponseStore:
        """The Responses API's stored responses."""
        ...
