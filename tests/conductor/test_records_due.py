"""The record prefill's queue (conductor/hidden/prewarm.py: RecordsDue): which sessions a
hybrid engine's idle time prefills, newest first, bounded, and nothing when off."""

from __future__ import annotations

from conductor.hidden.prewarm import RecordsDue


def drain(due: RecordsDue) -> list[tuple[str, str]]:
    taken = []
    while (key := due.take()) is not None:
        taken.append(key)
    return taken


def test_off_queues_nothing():
    due = RecordsDue()
    due.turn_recorded("ann", "s1")
    assert due.take() is None


def test_newest_first_once_a_session_and_bounded():
    due = RecordsDue(on=True, bound=3)
    for session in ("s1", "s2", "s3", "s1", "s4"):
        due.turn_recorded("ann", session)
    assert drain(due) == [("ann", "s4"), ("ann", "s1"), ("ann", "s3")]  # s2: the oldest


def test_a_prefill_that_gave_way_is_due_after_the_newer_ones_and_a_delete_drops_it():
    due = RecordsDue(on=True)
    due.turn_recorded("ann", "s1")
    due.turn_recorded("bob", "s2")
    assert due.take() == ("bob", "s2")
    due.again("bob", "s2")  # preempted
    due.turn_recorded("ann", "s3")
    assert drain(due) == [("ann", "s3"), ("ann", "s1"), ("bob", "s2")]
    due.turn_recorded("ann", "s1")
    due.again("ann", "s1")  # a newer turn of the session is due already: kept once
    due.turn_recorded("bob", "s2")
    due.forget_user("ann")
    assert drain(due) == [("bob", "s2")]
