"""The session ledger finds the longest recorded conversation the client's history extends."""

from __future__ import annotations

from conductor.ledger.id_blocks import BLOCK_SIZE, flat_ids
from conductor.ledger.records import Ledger, Record, VisibleMessage


def msg(role: str, text: str, calls=None) -> VisibleMessage:
    return VisibleMessage.of(role, text, calls)


def record(user: str, messages: list[VisibleMessage], ids: list[int],
           session: str = "s") -> Record:
    return Record(user=user, session=session, messages=tuple(messages), ids=tuple(ids),
                  ended_cleanly=True)


def test_the_longest_recorded_prefix_wins():
    ledger = Ledger()
    one = [msg("user", "a"), msg("assistant", "b")]
    two = [*one, msg("user", "c"), msg("assistant", "d")]
    ledger.record(record("u", one, [1, 2]))
    ledger.record(record("u", two, [1, 2, 3, 4]))
    match = ledger.find("u", "s", [*two, msg("user", "e")])
    assert tuple(match.record.ids) == (1, 2, 3, 4) and match.matched_messages == 4
    assert tuple(ledger.find("u", "s", [*one, msg("user", "x")]).record.ids) == (1, 2)


def test_whitespace_and_argument_formatting_do_not_break_a_match():
    ledger = Ledger()
    shown = [msg("user", "a"), msg("assistant", "b", [("f", '{"x": 1, "y": 2}')])]
    ledger.record(record("u", shown, [7]))
    sent_back = [msg("user", "a "), msg("assistant", "b\n", [("f", {"y": 2, "x": 1})]),
                 msg("tool", "r")]
    assert tuple(ledger.find("u", "s", sent_back).record.ids) == (7,)


def test_a_different_user_or_session_finds_nothing_and_a_changed_message_the_part_before():
    ledger = Ledger()
    shown = [msg("user", "a"), msg("assistant", "b")]
    ledger.record(record("u", shown, [7]))
    assert ledger.find("v", "s", [*shown, msg("user", "c")]) is None
    assert ledger.find("u", "other", [*shown, msg("user", "c")]) is None
    changed = [msg("user", "a"), msg("assistant", "B"), msg("user", "c")]
    match = ledger.find("u", "s", changed)
    assert match.partial and match.matched_messages == 1
    assert ledger.find("u", "s", [msg("user", "A"), *changed[1:]]) is None


def test_the_last_message_is_never_matched_against_itself():
    ledger = Ledger()
    shown = [msg("user", "a"), msg("assistant", "b")]
    ledger.record(record("u", shown, [7]))
    match = ledger.find("u", "s", shown)  # only the messages before it are shared
    assert match.partial and match.matched_messages == 1


def turns(n: int) -> list[VisibleMessage]:
    out: list[VisibleMessage] = []
    for k in range(n):
        out += [msg("user", f"q{k}"), msg("assistant", f"a{k}")]
    return out


def test_a_session_keeps_its_latest_records_for_regenerates_and_drops_older_ones():
    ledger = Ledger(per_session=2)
    for n in range(1, 4):
        ledger.record(record("u", turns(n), list(range(10 * n))))
    assert len(ledger) == 2 and tuple(ledger.latest("u", "s").ids) == tuple(range(30))
    regenerate = [*turns(2), msg("user", "q2")]  # turn 3's question again
    assert ledger.find("u", "s", regenerate).matched_messages == 4
    # the oldest is gone: a later record stands in for its turn, a partial match
    again = ledger.find("u", "s", [*turns(1), msg("user", "q1")])
    assert again.partial and again.matched_messages == 2


def test_over_the_token_bound_whole_idle_sessions_go_first():
    ledger = Ledger(max_tokens=100)
    ledger.record(record("u", turns(1), [1] * 30, session="idle"))
    ledger.record(record("u", turns(1), [2] * 30, session="used"))
    ledger.record(record("u", turns(1), [3] * 30, session="busy"))
    ledger.find("u", "used", [*turns(1), msg("user", "again")])  # used lately: not idle
    ledger.record(record("u", turns(2), [4] * 35, session="busy"))
    assert ledger.latest("u", "idle") is None  # least recently used: dropped whole
    assert ledger.latest("u", "used") is not None
    # The busy session keeps its turns before the latest: a regenerate needs them.
    assert ledger.find("u", "busy", [*turns(1), msg("user", "q1")]) is not None
    assert ledger.tokens == 95


def test_a_session_alone_over_the_bound_keeps_its_latest_record():
    ledger = Ledger(max_tokens=50)
    ledger.record(record("u", turns(1), [1] * 40))
    ledger.record(record("u", turns(2), [1] * 45))
    assert len(ledger) == 1 and len(ledger.latest("u", "s").ids) == 45


def test_records_hold_their_ids_compactly():
    ledger = Ledger()
    ledger.record(record("u", turns(1), list(range(1000))))
    ids = ledger.latest("u", "s").ids
    assert flat_ids(ids).itemsize == 4 and list(ids) == list(range(1000))
    assert len(ids.blocks) == 1000 // BLOCK_SIZE  # whole blocks, shared with any branch


def test_a_record_made_under_another_fingerprint_is_never_found_and_is_dropped():
    """Ids mean something only to the tokenizer and template that made them: a record
    loaded after a restart on another model is not replayed."""
    ledger = Ledger(fingerprint="qwen3-template")
    shown = [msg("user", "a"), msg("assistant", "b")]
    ledger.record(record("u", shown, [1, 2], session="old"))
    ledger.record(record("u", shown, [3, 4], session="kept"))
    assert ledger.latest("u", "old").fingerprint == "qwen3-template"  # stamped
    ledger.take_changes()
    ledger.fingerprint = "qwen25-template"  # as a restart on another profile sees them
    assert ledger.find("u", "old", [*shown, msg("user", "c")]) is None
    ledger.fingerprint = "qwen3-template"
    ledger.record(record("u", [*shown, msg("user", "c"), msg("assistant", "d")], [3, 4, 5],
                         session="kept"))
    ledger.take_changes()
    assert ledger.serve_fingerprint("qwen25-template") == 3
    changed, gone = ledger.take_changes()
    assert gone == {("u", "old"), ("u", "kept")} and not changed  # their files go too
    assert ledger.tokens == 0 and len(ledger) == 0
    ledger.record(record("u", shown, [9], session="new"))
    assert tuple(ledger.find("u", "new", [*shown, msg("user", "c")]).record.ids) == (9,)


def test_one_session_name_in_two_projects_and_with_memory_off_keeps_a_record_of_each():
    """A named session (X-Tandem-Session) a client uses in two projects, and with memory
    off, with the same messages: each record is replayed where it was made, none takes
    another's place (red when the key was the user, the session and the messages only:
    the last record made overwrote the others, and alpha's next turn found nothing)."""
    from dataclasses import replace

    ledger = Ledger()
    shown = [msg("user", "What do we deploy with?"), msg("assistant", "With the key.")]
    made = {("/w/alpha", False): [1, 2], ("/w/beta", False): [3, 4],
            ("/w/alpha", True): [5, 6], (None, False): [7, 8]}
    for (project, bare), ids in made.items():
        ledger.record(replace(record("u", shown, ids, session="same"), project=project,
                              bare=bare))
    query = [*shown, msg("user", "Thanks.")]
    for (project, bare), ids in made.items():
        match = ledger.find("u", "same", query, project, bare)
        assert match is not None and list(match.record.ids) == ids, (project, bare)
        assert match.matched_messages == 2 and not match.partial
    assert len(ledger.records("u", "same")) == 4


def test_the_latest_record_in_a_project_skips_the_same_session_name_in_another():
    """The session's newest record of the asking project, not of another project using
    the same session name (red when note_miss read `latest` alone: beta's record stood
    for alpha's history)."""
    from dataclasses import replace

    ledger = Ledger()
    shown = [msg("user", "a"), msg("assistant", "b")]
    ledger.record(replace(record("u", shown, [1, 2], session="same"), project="/w/alpha"))
    ledger.record(replace(record("u", [msg("user", "x"), msg("assistant", "y")], [3, 4],
                                 session="same"), project="/w/beta"))
    assert list(ledger.latest_in("u", "same", "/w/alpha").ids) == [1, 2]
    assert list(ledger.latest_in("u", "same", "/w/beta").ids) == [3, 4]
    assert ledger.latest_in("u", "same", None) is None
    assert ledger.latest_in("u", "other", "/w/alpha") is None
