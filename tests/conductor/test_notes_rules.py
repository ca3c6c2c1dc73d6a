"""Every write rule at its boundary: caps, kinds, scopes, verify_by, rules about the user."""

from __future__ import annotations

import pytest
from notes_helpers import add_distinct, words, write_raw_notes

from conductor.notes import NoteStore


def test_title_of_120_characters_is_accepted(store: NoteStore) -> None:
    title = "a" * 118 + " b"
    assert len(title) == 120
    result = store.add(title=title, body="x", kind="reference", scope="user")
    assert result.ok and result.note is not None and result.note.title == title


def test_title_of_121_characters_is_refused(store: NoteStore) -> None:
    result = store.add(title="a" * 119 + " b", body="x", kind="reference", scope="user")
    assert not result.ok
    assert result.reason == "title_too_long"
    assert result.note is None
    assert store.list() == []


def test_title_length_counts_after_whitespace_is_collapsed(store: NoteStore) -> None:
    result = store.add(
        title="  " + "a" * 60 + "   \n  " + "b" * 59 + "  ", kind="gotcha", scope="user"
    )
    assert result.ok and result.note is not None
    assert len(result.note.title) == 120


def test_empty_title_is_refused(store: NoteStore) -> None:
    assert store.add(title="   ", body="x", kind="reference", scope="user").reason == "title_empty"


def test_body_of_400_words_is_accepted(store: NoteStore) -> None:
    result = store.add(title="Long body", body=words(1, 400), kind="reference", scope="user")
    assert result.ok and result.note is not None
    assert len(result.note.body.split()) == 400


def test_body_of_401_words_is_refused_not_cut(store: NoteStore) -> None:
    result = store.add(title="Long body", body=words(1, 401), kind="reference", scope="user")
    assert (result.ok, result.reason) == (False, "body_too_long")
    assert store.list() == []


def test_20th_note_of_a_session_is_accepted_and_21st_refused(store: NoteStore) -> None:
    for i in range(20):
        result = add_distinct(store, i, session="s-1")
        assert result.ok and not result.revised_existing, (i, result)
    refused = add_distinct(store, 20, session="s-1")
    assert (refused.ok, refused.reason) == (False, "cap_session")
    # The cap is per conversation: another session may still write.
    assert add_distinct(store, 21, session="s-2").ok


def test_session_cap_counts_session_scope_and_other_scopes_alike(store: NoteStore) -> None:
    for i in range(19):
        assert add_distinct(store, i, session="s-1", scope="session").ok
    assert add_distinct(store, 19, session="s-1", scope="project", project="/work/p").ok
    assert add_distinct(store, 20, session="s-1", scope="user").reason == "cap_session"


def test_archiving_does_not_make_room_in_a_session(store: NoteStore) -> None:
    ids = [add_distinct(store, i, session="s-1").note.id for i in range(20)]  # type: ignore[union-attr]
    assert store.archive(ids[0], "obsolete").ok
    assert add_distinct(store, 99, session="s-1").reason == "cap_session"


def test_500th_live_note_of_a_user_is_accepted_and_501st_refused(store: NoteStore) -> None:
    write_raw_notes(store, 499)
    assert len(store.list()) == 499
    fifth_hundred = add_distinct(store, 1)
    assert fifth_hundred.ok and not fifth_hundred.revised_existing
    assert len(store.list()) == 500
    refused = add_distinct(store, 2)
    assert (refused.ok, refused.reason) == (False, "cap_user")
    # Archived notes are not live: archiving one makes room.
    assert store.user_archive("raw0000000").ok
    assert add_distinct(store, 3).ok


def test_a_revision_is_allowed_at_the_user_cap(store: NoteStore) -> None:
    write_raw_notes(store, 500)
    result = store.update("raw0000007", body="new text for this note")
    assert result.ok and result.note is not None and result.note.revision == 2


@pytest.mark.parametrize("kind", ["fact", "", "RULE", "memory"])
def test_unknown_kind_is_refused(store: NoteStore, kind: str) -> None:
    assert store.add(title="t", kind=kind, scope="user").reason == "unknown_kind"


def test_unknown_scope_is_refused(store: NoteStore) -> None:
    assert store.add(title="t", kind="gotcha", scope="global").reason == "unknown_scope"


def test_project_note_needs_a_project(store: NoteStore) -> None:
    assert store.add(title="t", kind="gotcha", scope="project").reason == "project_required"


def test_session_note_needs_a_session(store: NoteStore) -> None:
    assert store.add(title="t", kind="gotcha", scope="session").reason == "session_required"


@pytest.mark.parametrize("session", ["../etc", "a/b", ".hidden", "", "x" * 129])
def test_session_id_that_is_not_a_safe_name_is_refused(store: NoteStore, session: str) -> None:
    result = store.add(title="t", kind="gotcha", scope="session", session=session)
    assert result.reason == "bad_session"


def test_program_state_needs_verify_by(store: NoteStore) -> None:
    result = store.add(title="Deploy in progress", kind="program_state", scope="user")
    assert result.reason == "verify_by_required"
    ok = store.add(
        title="Deploy in progress", kind="program_state", scope="user", verify_by="2025-03-12"
    )
    assert ok.ok and ok.note is not None and ok.note.verify_by == "2025-03-12"


def test_unparseable_verify_by_is_refused(store: NoteStore) -> None:
    result = store.add(title="t", kind="program_state", scope="user", verify_by="next week")
    assert result.reason == "bad_verify_by"


def test_rule_about_the_user_needs_the_users_message(store: NoteStore) -> None:
    refused = store.add(
        title="Always answer in French", kind="rule", scope="user", has_user_message=False
    )
    assert refused.reason == "rule_needs_user_message"
    accepted = store.add(
        title="Always answer in French", kind="rule", scope="user", has_user_message=True
    )
    assert accepted.ok


def test_ruling_about_the_user_needs_the_users_message(store: NoteStore) -> None:
    result = store.add(title="Use metric units", kind="ruling", scope="user")
    assert result.reason == "rule_needs_user_message"


def test_background_writer_can_never_write_a_rule_about_the_user(store: NoteStore) -> None:
    result = store.add(
        title="Always answer in French",
        kind="rule",
        scope="user",
        source="writer",
        has_user_message=True,
    )
    assert result.reason == "rule_needs_user_message"


def test_writer_may_write_a_project_rule_and_other_kinds_about_the_user(
    store: NoteStore,
) -> None:
    assert store.add(
        title="Tabs in Makefiles", kind="rule", scope="project", project="/work/p", source="writer"
    ).ok
    assert store.add(title="User lives in Lyon", kind="reference", scope="user", source="writer").ok


def test_model_update_of_a_user_rule_needs_the_users_message(store: NoteStore) -> None:
    note = store.add(
        title="Answer in French", kind="rule", scope="user", has_user_message=True
    ).note
    assert note is not None
    refused = store.update(note.id, body="and in Spanish on Sundays", source="inline")
    assert refused.reason == "rule_needs_user_message"
    assert store.update(note.id, body="and in Spanish", has_user_message=True).ok


def test_model_notes_are_provisional(store: NoteStore) -> None:
    note = store.add(title="t", kind="gotcha", scope="user").note
    assert note is not None and note.status == "provisional"


def test_wrong_argument_types_raise(store: NoteStore) -> None:
    with pytest.raises(TypeError):
        store.add(title=None, kind="gotcha", scope="user")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        store.add(title="t", kind="gotcha", scope="user", source="telepathy")


def test_model_cannot_turn_a_user_rule_into_another_kind_without_the_users_message(
    store: NoteStore,
) -> None:
    rule = store.add(
        title="Answer in French", kind="rule", scope="user", has_user_message=True
    ).note
    assert rule is not None
    assert store.update(rule.id, kind="gotcha").reason == "rule_needs_user_message"
    again = store.add(
        title="Answer in French", body="x", kind="gotcha", scope="user", source="writer"
    )
    assert again.reason == "rule_needs_user_message"
    assert store.get(rule.id).kind == "rule"  # type: ignore[union-attr]
