"""Which notes a prefetch chooses (conductor/hidden/prefetch.py), on a real notes store."""

from __future__ import annotations

import dataclasses

import pytest

from conductor.hidden.prefetch import (
    ON_NOTES,
    PREFETCH_FRAME,
    PREFETCH_KIND,
    PrefetchDue,
    PrefetchLimits,
    choose_prefetch,
)
from conductor.hidden.tail_notes import DEFAULT_SHOWN, build_matches
from conductor.notes import NoteStore


def words(text: str) -> int:
    return len(text.split())


@pytest.fixture
def store(tmp_path) -> NoteStore:
    store = NoteStore(tmp_path / "memory", "tester")
    for n in range(6):
        assert store.add(title=f"kafka consumer note {n}", body=f"kafka consumer fix {n}",
                         kind="gotcha", scope="user", source="cli").ok
    return store


TURN = "why is it lagging?\nThe kafka consumer is behind."


def choose(store, already=frozenset(), room=ON_NOTES, budget=300):
    return choose_prefetch(store, TURN, store.list(), set(already), words, DEFAULT_SHOWN,
                           room, budget)


def test_a_prefetch_takes_the_turns_matches_within_its_room(store):
    chosen = choose(store, room=2)
    assert not PrefetchLimits().on and PrefetchLimits(notes=ON_NOTES).on  # off by default
    assert chosen.kind == PREFETCH_KIND and len(chosen.note_ids) == 2
    # its preamble says the notes are about what comes next: they stand before it
    assert chosen.text.startswith(PREFETCH_FRAME)


def test_notes_the_record_holds_are_not_prefetched_again(store):
    first = choose(store)
    again = choose(store, already=first.note_ids)
    assert not set(first.note_ids) & set(again.note_ids)


def test_the_session_cap_counts_what_was_prefetched_before():
    limits = PrefetchLimits(notes=3, session_cap=4)
    assert [limits.guess_room(given) for given in (0, 3, 4, 5)] == [3, 1, 0, -1]


def test_a_token_budget_too_small_for_any_note_prefetches_nothing(store):
    assert choose(store, budget=5) is None
    assert choose(store, budget=0) is None and choose(store, room=0) is None


def test_zero_notes_is_prefetch_off_and_zero_hint_notes_refuses_hints():
    assert not PrefetchLimits(notes=0).on and PrefetchLimits().hints_on
    assert not PrefetchLimits(hint_notes=0).hints_on
    with pytest.raises(ValueError):
        PrefetchLimits(budget=-1)


def test_due_sessions_come_most_recent_first_once_and_bounded():
    due = PrefetchDue(bound=2)
    for session in ("a", "b", "a", "c"):
        due.turn_recorded("u", session)
    assert due.take() == [("u", "c"), ("u", "a")]
    assert due.take() == []


def test_one_users_flood_never_pushes_out_another_users_due_session_or_hint():
    """Each user's own slots: a user with forty sessions and hints drops only their own
    oldest; another user's session and hint stay, and wait behind one of theirs."""
    due = PrefetchDue(bound=4)
    due.hinted("bob", "draft", "how do I restart the kafka")
    due.turn_recorded("bob", "older")
    for n in range(40):
        due.hinted("mallory", f"s{n}", f"flood {n}")
    assert due.hint("bob", "draft") == "how do I restart the kafka"
    assert due.hint("mallory", "s0") is None and due.hint("mallory", "s39") == "flood 39"
    taken = due.take()
    assert len(taken) == 2 + 4  # bob's two, mallory's four newest
    assert taken[:4] == [("mallory", "s39"), ("bob", "older"), ("mallory", "s38"),
                         ("bob", "draft")]
    assert due.take() == [] and due.hint("bob", "draft") is not None  # hints stay


def test_sessions_not_reached_go_back_behind_newer_ones_within_their_users_bound():
    due = PrefetchDue(bound=3)
    for session in ("a", "b", "c"):
        due.turn_recorded("u", session)
    taken = due.take()
    due.turn_recorded("u", "d")  # due while the tick ran
    due.put_back(taken)
    assert due.take() == [("u", "d"), ("u", "c"), ("u", "b")]  # "a", the oldest, dropped


def test_the_users_held_are_bounded_the_one_idle_longest_goes():
    due = PrefetchDue(bound=2, users=2)
    due.hinted("ann", "s", "one")
    due.hinted("bob", "s", "two")
    due.turn_recorded("ann", "t")  # ann is active again
    due.hinted("cy", "s", "three")
    assert (due.hint("ann", "s"), due.hint("bob", "s"), due.hint("cy", "s")) == (
        "one", None, "three")
    due.hint_used("ann", "s", "one")
    due.message_came("cy", "s")
    assert sorted(due.take()) == [("ann", "s"), ("ann", "t"), ("cy", "s")]
    assert len(due) == 0


def test_a_named_session_goes_on_from_its_first_turn_a_derived_one_from_its_second():
    from conductor.hidden.prefetch import goes_on

    assert goes_on(False, ["user", "assistant"])
    assert not goes_on(True, ["user", "assistant"])
    assert goes_on(True, ["system", "user", "assistant", "user", "assistant"])


def test_a_prefetched_note_the_message_matches_takes_its_match_slot(store):
    """A right guess costs nothing after the message: the match it answers is in place,
    and no other note is prefilled in its stead (a note matched earlier is skipped and
    another one matched, as before)."""
    message = "how do I fix the kafka consumer?"
    (top,) = build_matches(store, message, store.list(), set(), words, DEFAULT_SHOWN).note_ids
    assert build_matches(store, message, store.list(), {top}, words, DEFAULT_SHOWN,
                         in_place=frozenset({top})) is None
    instead = build_matches(store, message, store.list(), {top}, words, DEFAULT_SHOWN)
    assert instead is not None and instead.note_ids != (top,)
    two = dataclasses.replace(DEFAULT_SHOWN, max_matches=2)
    (other,) = build_matches(store, message, store.list(), {top}, words, two,
                             in_place=frozenset({top})).note_ids
    assert other != top


def test_the_guess_over_a_whole_turn_wants_three_shared_stems_a_hint_two(tmp_path):
    """A finished turn (message and answer, the bench's threaded follow-up about the test
    pool) shares two stems by chance with a note it is not about ("fail" and "test" with
    the flaky test's note): the guess leaves that note, which would take a slot of the
    session's cap, and takes the pool's note; a hint, a message being typed, keeps the
    message's rule of two."""
    store = NoteStore(tmp_path / "memory", "tester")
    for title, body in (
            ("database connection pool", "SQLAlchemy async engine with pool size 10; tests "
             "override it with NullPool to avoid leaks between tests."),
            ("flaky test_refund_race on slow machines", "test_refund_race depends on a 200 "
             "ms sleep; it fails under load and is marked flaky in CI.")):
        assert store.add(title=title, body=body, kind="gotcha", scope="user",
                         source="cli").ok
    turn = ("That fixed it, but a few tests now fail with too many connections open. How "
            "is the database pool configured for the tests?\nThe app's engine uses a pool "
            "of 10; tests swap in NullPool in conftest.py so nothing is held between tests.")
    titles = {n.id: n.title for n in store.list()}

    def chosen(from_turn: bool) -> list[str]:
        found = choose_prefetch(store, turn, store.list(), set(), words, DEFAULT_SHOWN,
                                ON_NOTES, 300, from_turn=from_turn)
        return sorted(titles[i] for i in found.note_ids)

    assert chosen(from_turn=True) == ["database connection pool"]
    assert chosen(from_turn=False) == ["database connection pool",
                                       "flaky test_refund_race on slow machines"]


def test_branch_candidates_put_the_guess_first_then_uses_then_the_newest(tmp_path):
    from conductor.hidden.branches import branch_candidates
    from conductor.hidden.tail_notes import matched_tail

    store = NoteStore(tmp_path / "memory", "tester")
    ids = {}
    for title, body in (("kafka consumer restart", "restart the kafka consumer"),
                        ("office wifi", "on the fridge"), ("staging port", "5433"),
                        ("lunch order", "on fridays"), ("held", "in the record"),
                        ("long", "word " * 150)):
        result = store.add(title=title, body=body, kind="gotcha", scope="user", source="cli")
        ids[title] = result.note.id
    store.record_injection([ids["office wifi"]] * 1)
    store.record_injection([ids["office wifi"], ids["staging port"]])
    store.record_injection([ids["office wifi"]])
    shown = dataclasses.replace(DEFAULT_SHOWN, match_budget=120)  # in words: "long" is past
    found = branch_candidates(store, "why is it lagging?\nRestart the kafka consumer.",
                              store.list(), {ids["held"]}, words, shown, limit=8)
    # the guess's match first, then by uses (3, 1), then the newest; not a note the record
    # holds, nor one whose tail alone is past the match budget
    assert [n.title for n, _ in found] == ["kafka consumer restart", "office wifi",
                                           "staging port", "lunch order"]
    # each with the text its match puts before the message, byte for byte
    assert [text for _, text in found] == [matched_tail([n], shown).text for n, _ in found]
    assert len(branch_candidates(store, "", store.list(), set(), words, shown,
                                 limit=2)) == 2


def test_a_branch_is_remembered_once_a_record_and_the_sessions_are_bounded():
    from conductor.hidden.branches import BranchesDone

    done = BranchesDone(bound=2)
    record = [1, 2, 3]
    done.branched("u", "s", record, ["a"])
    done.branched("u", "s", record, ["b"])
    assert done.done("u", "s", record) == {"a", "b"}
    assert done.done("u", "s", [1, 2, 3, 4]) == set()  # a new record: all due again
    assert done.done("u", "s", [1, 2, 4]) == set()  # an edit of the same length too
    done.branched("u", "t", record, ["a"])
    done.branched("v", "s", record, ["a"])  # past the bound: the oldest session goes
    assert done.done("u", "s", record) == set() and done.done("v", "s", record) == {"a"}
    done.forget_user("v")
    assert done.done("v", "s", record) == set() and done.done("u", "t", record) == {"a"}
