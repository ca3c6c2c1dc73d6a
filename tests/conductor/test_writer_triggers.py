"""When the background writer visits a session."""

from __future__ import annotations

from conductor.writing.triggers import WriterTriggers


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def triggers() -> tuple[WriterTriggers, Clock]:
    clock = Clock()
    return WriterTriggers(idle_s=180, min_new_tokens=1500, clock=clock), clock


def test_a_session_ends_after_180_idle_seconds_with_1500_new_tokens():
    t, clock = triggers()
    t.turn_done("u", "s", 1500)
    clock.now += 179
    assert t.due() == []
    clock.now += 1
    assert t.due() == [("u", "s", "session_end")]


def test_a_quiet_session_with_few_new_tokens_is_not_due():
    t, clock = triggers()
    t.turn_done("u", "s", 1499)
    clock.now += 10_000
    assert t.due() == []


def test_a_new_turn_restarts_the_idle_clock():
    t, clock = triggers()
    t.turn_done("u", "s", 2000)
    clock.now += 170
    t.turn_done("u", "s", 10)
    clock.now += 170
    assert t.due() == []


def test_give_up_and_compaction_are_due_at_once():
    t, _ = triggers()
    t.give_up("u", "a")
    assert t.compaction("u", "b", "history of b", b"key-b")
    assert sorted(t.due()) == [("u", "a", "give_up"), ("u", "b", "compaction")]


def test_a_compaction_hands_its_dropped_history_to_the_writer_once():
    t = WriterTriggers()
    assert t.compaction("u", "s", "the dropped history", b"key")
    assert t.dropped("u", "s") == "the dropped history"
    t.visited("u", "s", preempted=False)
    assert t.dropped("u", "s") is None and t.due() == []
    assert not t.compaction("u", "s", "the dropped history", b"key")  # the same one: no
    assert t.due() == []


def test_a_visit_resets_the_session_but_a_preempted_one_does_not():
    t, clock = triggers()
    t.turn_done("u", "s", 2000)
    clock.now += 200
    t.visited("u", "s", preempted=True)
    assert t.due() == [("u", "s", "session_end")]
    t.visited("u", "s", preempted=False)
    assert t.due() == []


def test_tandem_writer_idle_s_moves_the_session_end(monkeypatch, tmp_path):
    """$TANDEM_WRITER_IDLE_S=7.5: the server's triggers end a session with 1,500 new tokens
    after 7.5 idle seconds, not 180 and not sooner (docs/memory/notes.md)."""
    from conductor.memory.services import MemoryServices

    monkeypatch.setenv("TANDEM_WRITER_IDLE_S", "7.5")
    t = MemoryServices(tmp_path).idle.triggers
    clock = Clock()
    t.clock = clock
    t.turn_done("u", "s", 1500)
    clock.now = 1007.4
    assert t.due() == []
    clock.now = 1007.5
    assert t.due() == [("u", "s", "session_end")]


def test_the_bookkeeping_stays_bounded_and_keeps_what_is_pending():
    triggers = WriterTriggers(max_sessions=8)
    triggers.give_up("u", "pending")
    triggers.turn_done("u", "pending", 10)
    for n in range(100):
        triggers.turn_done("u", f"s{n}", 10)
    assert len(triggers._sessions) == 8
    assert ("u", "pending") in triggers._sessions  # a pending one is never dropped
    assert ("u", "s99") in triggers._sessions and ("u", "s0") not in triggers._sessions
    assert ("u", "pending", "give_up") in triggers.due()
