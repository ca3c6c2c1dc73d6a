"""The session ledger finds the longest recorded conversation the client's history extends."""

from __future__ import annotations

from conductor.ledger import Ledger, Record, VisibleMessage


def msg(role: str, text: str, calls=None) -> VisibleMessage:
    return VisibleMessage.of(role, text, calls)


def record(user: str, messages: list[VisibleMessage], ids: list[int]) -> Record:
    return Record(user=user, session="s", messages=tuple(messages), ids=tuple(ids),
                  ended_cleanly=True)


def test_the_longest_recorded_prefix_wins():
    ledger = Ledger()
    one = [msg("user", "a"), msg("assistant", "b")]
    two = [*one, msg("user", "c"), msg("assistant", "d")]
    ledger.record(record("u", one, [1, 2]))
    ledger.record(record("u", two, [1, 2, 3, 4]))
    match = ledger.find("u", "s", [*two, msg("user", "e")])
    assert match.record.ids == (1, 2, 3, 4) and match.matched_messages == 4
    assert ledger.find("u", "s", [*one, msg("user", "x")]).record.ids == (1, 2)


def test_whitespace_and_argument_formatting_do_not_break_a_match():
    ledger = Ledger()
    shown = [msg("user", "a"), msg("assistant", "b", [("f", '{"x": 1, "y": 2}')])]
    ledger.record(record("u", shown, [7]))
    sent_back = [msg("user", "a "), msg("assistant", "b\n", [("f", {"y": 2, "x": 1})]),
                 msg("tool", "r")]
    assert ledger.find("u", "s", sent_back).record.ids == (7,)


def test_a_different_user_session_or_message_finds_nothing():
    ledger = Ledger()
    shown = [msg("user", "a"), msg("assistant", "b")]
    ledger.record(record("u", shown, [7]))
    assert ledger.find("v", "s", [*shown, msg("user", "c")]) is None
    assert ledger.find("u", "other", [*shown, msg("user", "c")]) is None
    changed = [msg("user", "a"), msg("assistant", "B"), msg("user", "c")]
    assert ledger.find("u", "s", changed) is None


def test_the_last_message_is_never_matched_against_itself():
    ledger = Ledger()
    shown = [msg("user", "a"), msg("assistant", "b")]
    ledger.record(record("u", shown, [7]))
    assert ledger.find("u", "s", shown) is None


def test_old_records_are_dropped_beyond_the_limit():
    ledger = Ledger(max_records=2)
    for n in range(3):
        ledger.record(record("u", [msg("user", str(n)), msg("assistant", "x")], [n]))
    assert len(ledger) == 2
    oldest = [msg("user", "0"), msg("assistant", "x"), msg("user", "?")]
    assert ledger.find("u", "s", oldest) is None
