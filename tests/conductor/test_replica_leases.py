"""One writer per user across replicas: the lease keeper over the in-memory service, and
the store's fencing check (conductor/memory/lease.py, conductor/storage/fence.py). The
same keeper over a real etcd: tests/replicas (the replicas lane)."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest

from conductor.layers.state import ConversationState
from conductor.layers.turn_format import Part, Turn, TurnMessage
from conductor.layers.user_layers import UserLayers
from conductor.memory.lease import Lease, LeaseBusy, LeaseKeeper, MemoryLeases
from conductor.memory.services import MemoryServices
from conductor.memory.settings import MemorySettings
from conductor.notes import NoteStore
from conductor.storage.fence import StaleToken, check_token, fenced, seen_token
from conductor.storage.paths import Layout


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _replica(root: Path, service: MemoryLeases, name: str, clock: Clock,
             user: str = "ana") -> tuple[NoteStore, LeaseKeeper]:
    keeper = LeaseKeeper(service, name, ttl_s=10, idle_s=60, clock=clock)
    store = NoteStore(root, user)
    store.fence = lambda: keeper.token(user)
    return store, keeper


def _add(store: NoteStore, title: str):
    return store.add(title=title, body="a fact", kind="reference", scope="user")


def _journal(root: Path) -> list[dict]:
    return [json.loads(line) for line in (root / "journal.jsonl").read_text().splitlines()]


def test_two_replicas_asked_to_write_one_user_one_wins_the_other_is_told_to_retry(tmp_path):
    clock = Clock()
    service = MemoryLeases(clock)
    a, _ = _replica(tmp_path, service, "replica-a", clock)
    b, _ = _replica(tmp_path, service, "replica-b", clock)
    assert _add(a, "Ana drinks tea").ok
    refused = _add(b, "Ana likes rain")
    assert (refused.ok, refused.reason, refused.holder) == (False, "lease_busy", "replica-a")
    assert 1 <= refused.retry_after <= 10
    assert [n.title for n in a.list()] == ["Ana drinks tea"]
    # every write carried the writer's token; the refused one wrote nothing
    writes = [e for e in _journal(tmp_path) if e.get("op") == "add" and e.get("ok")]
    assert [e["fence"] for e in writes] == [1]


def test_a_dead_replicas_lease_expires_and_the_next_writer_has_a_higher_token(tmp_path):
    clock = Clock()
    service = MemoryLeases(clock)
    a, keeper_a = _replica(tmp_path, service, "replica-a", clock)
    b, _ = _replica(tmp_path, service, "replica-b", clock)
    assert _add(a, "Ana drinks tea").ok
    clock.now += 4
    keeper_a.tick()  # renewed while it serves the user
    clock.now += 8
    assert _add(b, "Ana likes rain").reason == "lease_busy"  # 12 s after: still renewed
    clock.now += 11  # replica-a died: no renewal for a whole ttl
    assert _add(b, "Ana likes rain").ok
    tokens = [e["fence"] for e in _journal(tmp_path) if e.get("op") == "add" and e.get("ok")]
    assert tokens[0] < tokens[1]
    assert sorted(n.title for n in b.list()) == ["Ana drinks tea", "Ana likes rain"]


def test_a_stale_writers_late_write_is_refused_by_its_token(tmp_path):
    """A writer that paused past its lease (it still believes it holds token 1) writes
    after the next holder wrote with token 2: the store refuses it and writes nothing."""
    clock = Clock()
    service = MemoryLeases(clock)
    stale = NoteStore(tmp_path, "ana")
    stale.fence = lambda: 1  # what the paused writer's keeper handed out before its pause
    assert _add(stale, "Ana drinks tea").ok
    service.acquire("ana", "replica-a", 10)  # the paused writer's lease, token 1
    clock.now += 11  # ... expired during the pause
    b, _ = _replica(tmp_path, service, "replica-b", clock)
    assert _add(b, "Ana likes rain").ok
    late = _add(stale, "Ana moved to Lisbon")
    assert (late.ok, late.reason) == (False, "stale_lease")
    assert sorted(n.title for n in b.list()) == ["Ana drinks tea", "Ana likes rain"]
    assert json.loads((tmp_path / "notes" / "ana" / "fence.json").read_text()) == {"token": 2}


def _turn(text: str):
    def make(seq: int) -> Turn:
        return Turn(seq, datetime(2026, 12, 4, tzinfo=UTC), 0,
                    (TurnMessage("user", (Part("text", text),)),
                     TurnMessage("assistant", (Part("text", "ok"),))))
    return make


def _turn_files(root: Path, user: str = "ana") -> list[Path]:
    return sorted((root / "layers" / user / "history" / "turns").rglob("*.json"))


def test_a_stale_writers_late_history_turn_and_layer_write_are_refused_by_its_token(tmp_path):
    """The layers and the continuous history share the notes' fence record: a writer
    that paused past its lease (token 1) writes a history turn and the conversation's
    state after the next holder wrote a note with token 2; both are refused, nothing of
    them is on disk."""
    clock = Clock()
    service = MemoryLeases(clock)
    stale = UserLayers(tmp_path, "ana")
    stale.fence = lambda: 1  # what the paused writer's keeper handed out before its pause
    stale.history.append(_turn("before the pause"))
    service.acquire("ana", "replica-a", 10)  # the paused writer's lease, token 1
    clock.now += 11  # ... expired during the pause
    b, _ = _replica(tmp_path, service, "replica-b", clock)
    assert _add(b, "Ana likes rain").ok  # token 2, recorded beside her notes
    with pytest.raises(StaleToken):
        stale.history.append(_turn("a late turn"))
    with pytest.raises(StaleToken):
        stale.save_state(ConversationState(checkpoint_seq=1))
    assert len(_turn_files(tmp_path)) == 1
    assert not (tmp_path / "layers" / "ana" / "state").exists()
    assert json.loads((tmp_path / "notes" / "ana" / "fence.json").read_text()) == {"token": 2}


def test_a_history_turns_token_fences_a_late_note_write(tmp_path):
    """The other way round: the new writer's first write is a history turn (token 2); the
    stale writer's late note (token 1) is refused."""
    stale = NoteStore(tmp_path, "ana")
    stale.fence = lambda: 1
    assert _add(stale, "Ana drinks tea").ok
    writer = UserLayers(tmp_path, "ana")
    writer.fence = lambda: 2
    writer.history.append(_turn("the new writer's turn"))
    late = _add(stale, "Ana moved to Lisbon")
    assert (late.ok, late.reason) == (False, "stale_lease")
    assert [n.title for n in stale.list()] == ["Ana drinks tea"]


def test_a_replica_writes_a_users_history_only_while_it_holds_their_lease(tmp_path,
                                                                         monkeypatch):
    """MemoryServices hands each user's layers the lease's token: the first history turn
    takes the lease; another replica's turn for the user is refused lease_busy."""
    # a shared root sets TANDEM_INDEX_DIR when unset: set here, so it goes after the test
    monkeypatch.setenv("TANDEM_INDEX_DIR", str(tmp_path / "replica-index"))
    clock = Clock()
    service = MemoryLeases(clock)
    shared = tmp_path / "shared"
    replicas = []
    for name in ("replica-a", "replica-b"):
        services = MemoryServices(tmp_path / name, settings=MemorySettings(
            shared_memory=shared, replica=name))
        services.leases = LeaseKeeper(service, name, ttl_s=10, idle_s=60, clock=clock)
        replicas.append(services)
    a, b = replicas
    a.layers("ana").history.append(_turn("hello"))
    with pytest.raises(LeaseBusy):
        b.layers("ana").history.append(_turn("hello from elsewhere"))
    assert len(_turn_files(shared)) == 1
    assert a.leases.held() == {"ana": 1}


def test_a_restarted_replica_takes_its_former_processes_lease_at_once(tmp_path):
    clock = Clock()
    service = MemoryLeases(clock)
    a, _ = _replica(tmp_path, service, "replica-a", clock)
    assert _add(a, "Ana drinks tea").ok
    again, _ = _replica(tmp_path, service, "replica-a", clock)  # the same name, a new process
    assert _add(again, "Ana likes rain").ok  # no wait for the old lease's ttl
    tokens = [e["fence"] for e in _journal(tmp_path) if e.get("op") == "add" and e.get("ok")]
    assert tokens == [1, 2]


def test_an_idle_users_lease_is_let_go_so_their_next_replica_writes_at_once(tmp_path):
    clock = Clock()
    service = MemoryLeases(clock)
    a, keeper_a = _replica(tmp_path, service, "replica-a", clock)
    b, _ = _replica(tmp_path, service, "replica-b", clock)
    assert _add(a, "Ana drinks tea").ok
    for _ in range(20):  # a minute and more of renewals, no write
        clock.now += 3.4
        keeper_a.tick()
    assert keeper_a.held() == {}
    assert _add(b, "Ana likes rain").ok


def test_the_keeper_stops_using_a_lease_it_could_not_renew(tmp_path):
    """A renewal that stalls (the service unreachable) never lets a write past the
    lease's expiry: the keeper asks for the lease again once 2/3 of its ttl passed."""
    clock = Clock()
    service = MemoryLeases(clock)
    keeper = LeaseKeeper(service, "replica-a", ttl_s=10, clock=clock)
    assert keeper.token("ana") == 1
    clock.now += 11  # no renewal reached the service: the lease expired there
    service.acquire("ana", "replica-b", 10)
    with pytest.raises(LeaseBusy):
        keeper.token("ana")


class CountedLeases(MemoryLeases):
    """The in-memory service, its acquire calls counted."""

    def __init__(self, clock) -> None:
        super().__init__(clock)
        self.acquires = 0

    def acquire(self, user: str, holder: str, ttl_s: float):
        self.acquires += 1
        return super().acquire(user, holder, ttl_s)


def test_a_refusal_is_answered_again_without_a_call_for_a_moment(tmp_path):
    """`ahead` takes the lease in a worker thread before a write that runs on the event
    loop; when it was refused, the write right after meets the same refusal without a
    second call to the service (which would hold the loop), and a second later asks
    again."""
    import asyncio

    from conductor.memory.lease import REFUSAL_KEPT_S

    clock = Clock()
    service = CountedLeases(clock)
    service.acquire("ana", "replica-a", 10)
    keeper = LeaseKeeper(service, "replica-b", ttl_s=10, clock=clock)
    asyncio.run(keeper.ahead("ana"))  # refused: replica-a holds it; not raised here
    calls = service.acquires
    with pytest.raises(LeaseBusy):
        keeper.token("ana")
    assert service.acquires == calls  # the write met the kept refusal, no call
    clock.now += REFUSAL_KEPT_S
    with pytest.raises(LeaseBusy):
        keeper.token("ana")
    assert service.acquires == calls + 1
    mine = LeaseKeeper(service, "replica-c", ttl_s=10, clock=clock)
    assert mine.token("bo") > 0
    calls = service.acquires
    asyncio.run(mine.ahead("bo"))  # kept and fresh: no call at all
    assert service.acquires == calls


class _FallingTokens(MemoryLeases):
    """A service whose revision went back (a restored etcd snapshot): each lease's token
    is lower than the one before."""

    def acquire(self, user: str, holder: str, ttl_s: float):
        got = super().acquire(user, holder, ttl_s)
        return replace(got, token=100 - got.token) if isinstance(got, Lease) else got


def test_a_keeper_refuses_a_new_lease_whose_token_is_not_higher_than_its_last(tmp_path):
    clock = Clock()
    keeper = LeaseKeeper(_FallingTokens(clock), "replica-a", ttl_s=10, idle_s=5, clock=clock)
    assert keeper.token("ana") == 99
    clock.now += 6
    keeper.tick()  # idle: let go
    with pytest.raises(AssertionError, match="token that fell"):
        keeper.token("ana")


def test_the_fence_check_runs_only_under_the_users_fence_lock(tmp_path):
    with fenced(tmp_path, "ana", 3):
        pass
    with pytest.raises(AssertionError, match="outside the fence lock"):
        check_token(tmp_path, "ana", 4)
    assert seen_token(Layout(tmp_path, "ana").user_dir) == 3
