"""Who may do what to a note: model revisions and archives, the user's decisions."""

from __future__ import annotations

from notes_helpers import FakeClock, read_front

from conductor.notes import NoteStore
from conductor.notes.note_format import Note


def _ratified(store: NoteStore, **kw: object) -> Note:
    fields: dict[str, object] = {
        "title": "Answer in French",
        "body": "Always.",
        "kind": "rule",
        "scope": "user",
        "has_user_message": True,
    }
    fields.update(kw)
    note = store.add(**fields).note  # type: ignore[arg-type]
    assert note is not None
    result = store.ratify(note.id)
    assert result.ok and result.note is not None and result.note.status == "ratified"
    return result.note


def test_model_revision_of_a_ratified_note_makes_it_provisional(store: NoteStore) -> None:
    note = _ratified(store)
    result = store.update(
        note.id, body="Always, except in code.", reason="user clarified", has_user_message=True
    )
    assert result.ok and result.note is not None
    assert result.note.status == "provisional"
    assert result.note.revision == 2
    earlier = store.layout.revision_path(note.id, 1)
    assert read_front(earlier)["status"] == "ratified"
    last = result.note.changelog[-1]
    assert (last["by"], last["what"], last["why"]) == ("model", "revise", "user clarified")


def test_model_archive_of_a_ratified_note_keeps_it_live(store: NoteStore) -> None:
    note = _ratified(store)
    result = store.archive(note.id, "the user moved to Spain")
    assert result.ok and result.kept_live
    live = store.get(note.id)
    assert live is not None and not live.archived
    assert live.status == "ratified"
    assert live.archive_proposed == "the user moved to Spain"
    last = live.changelog[-1]
    assert (last["by"], last["what"], last["why"]) == (
        "model",
        "archive_request",
        "the user moved to Spain",
    )
    assert [n.id for n in store.list()] == [note.id]


def test_user_archive_after_a_model_request_archives_it(store: NoteStore) -> None:
    note = _ratified(store)
    store.archive(note.id, "outdated")
    result = store.user_archive(note.id)
    assert result.ok and result.note is not None and result.note.archived
    assert store.list() == []
    assert [n.id for n in store.list(state="archived")] == [note.id]


def test_ratifying_again_drops_the_model_archive_request(store: NoteStore) -> None:
    note = _ratified(store)
    store.archive(note.id, "outdated")
    result = store.ratify(note.id)
    assert result.ok and result.note is not None
    assert result.note.archive_proposed is None
    assert result.note.changelog[-1]["what"] == "ratify"


def test_model_archive_of_a_provisional_note_moves_it_to_the_archive(
    store: NoteStore, clock: FakeClock
) -> None:
    note = store.add(title="Old gotcha", kind="gotcha", scope="project", project="/w/app").note
    assert note is not None
    result = store.archive(note.id, "fixed upstream")
    assert result.ok and not result.kept_live and result.note is not None
    path = result.note.path
    assert path is not None
    assert path.is_relative_to(store.layout.archive_dir / "2025-03" / "projects")
    assert read_front(path)["archive_reason"] == "fixed upstream"
    assert not list(store.layout.scope_dir("project", note.project).glob("*.md"))


def test_archive_needs_a_reason(store: NoteStore) -> None:
    note = store.add(title="t", kind="gotcha", scope="user").note
    assert note is not None
    assert store.archive(note.id, "  ").reason == "reason_required"


def test_operations_on_a_missing_note_say_not_found(store: NoteStore) -> None:
    for result in (
        store.update("nope", body="x"),
        store.archive("nope", "why"),
        store.edit("nope", body="x"),
        store.ratify("nope"),
        store.reject("nope"),
        store.pin("nope"),
        store.user_archive("nope"),
        store.delete("nope"),
    ):
        assert (result.ok, result.reason) == (False, "not_found"), result.op


def test_model_cannot_update_an_archived_note(store: NoteStore) -> None:
    note = store.add(title="t", kind="gotcha", scope="user").note
    assert note is not None
    store.user_archive(note.id)
    assert store.update(note.id, body="x").reason == "archived"


def test_user_edit_lands_as_a_ratified_revision(store: NoteStore) -> None:
    note = store.add(
        title="Deploys on Fridays",
        body="Allowed.",
        kind="ruling",
        scope="project",
        project="/w/app",
    ).note
    assert note is not None
    result = store.edit(note.id, body="Never on Fridays.", via="cli")
    assert result.ok and result.note is not None
    assert result.note.status == "ratified" and result.note.revision == 2
    assert result.note.changelog[-1]["by"] == "user"
    assert store.layout.revision_path(note.id, 1).exists()


def test_user_edit_is_held_to_the_caps(store: NoteStore) -> None:
    note = store.add(title="t", kind="gotcha", scope="user").note
    assert note is not None
    assert store.edit(note.id, title="x" * 121).reason == "title_too_long"


def test_title_change_renames_the_file_and_leaves_no_copy(store: NoteStore) -> None:
    note = store.add(title="Old name", kind="gotcha", scope="user").note
    assert note is not None and note.path is not None
    result = store.edit(note.id, title="New name")
    assert result.note is not None and result.note.path is not None
    assert result.note.path.name == f"gotcha-new-name--{note.id}.md"
    assert not note.path.exists()
    assert len(list(store.layout.scope_dir("user", None).glob("*.md"))) == 1


def test_reject_archives_a_provisional_note(store: NoteStore) -> None:
    note = store.add(title="t", kind="gotcha", scope="user").note
    assert note is not None
    result = store.reject(note.id)
    assert result.ok and result.note is not None and result.note.archived
    assert result.note.changelog[-1]["what"] == "reject"


def test_reject_refuses_a_ratified_note(store: NoteStore) -> None:
    note = _ratified(store)
    assert store.reject(note.id).reason == "already_ratified"


def test_only_ratified_rules_can_be_pinned(store: NoteStore) -> None:
    gotcha = store.add(title="A gotcha", kind="gotcha", scope="user").note
    rule = store.add(title="A rule", kind="rule", scope="user", has_user_message=True).note
    assert gotcha is not None and rule is not None
    assert store.pin(gotcha.id).reason == "not_a_rule"
    assert store.pin(rule.id).reason == "not_ratified"
    store.ratify(rule.id)
    pinned = store.pin(rule.id)
    assert pinned.ok and pinned.note is not None and pinned.note.pin_active
    unpinned = store.pin(rule.id, False)
    assert unpinned.ok and unpinned.note is not None and not unpinned.note.pinned


def test_a_pin_only_counts_while_the_rule_is_ratified(store: NoteStore) -> None:
    rule = _ratified(store)
    store.pin(rule.id)
    revised = store.update(rule.id, body="Except on Sundays.", has_user_message=True).note
    assert revised is not None and revised.pinned and not revised.pin_active
    store.ratify(rule.id)
    again = store.get(rule.id)
    assert again is not None and again.pin_active


def test_delete_removes_the_note_its_revisions_and_usage(store: NoteStore) -> None:
    note = store.add(title="t", body="one", kind="gotcha", scope="user").note
    assert note is not None
    store.update(note.id, body="two")
    store.record_injection([note.id], "r1")
    assert store.layout.revisions_dir.joinpath(note.id).exists()
    result = store.delete(note.id, via="cli")
    assert result.ok
    assert store.get(note.id) is None
    assert not store.layout.revisions_dir.joinpath(note.id).exists()
    assert store.usage(note.id)["total"] == 0


def test_delete_works_on_an_archived_note(store: NoteStore) -> None:
    note = store.add(title="t", kind="gotcha", scope="user").note
    assert note is not None
    store.user_archive(note.id)
    assert store.delete(note.id).ok
    assert store.list(state="all") == []


def test_delete_all_removes_the_users_tree_only(store: NoteStore) -> None:
    bob = store.for_user("bob")
    store.add(title="a", kind="gotcha", scope="user")
    store.add(title="b", kind="gotcha", scope="session", session="s1")
    bob.add(title="c", kind="gotcha", scope="user")
    result = store.delete_all()
    assert result.ok and result.count == 2
    assert store.list(state="all") == []
    assert [n.title for n in bob.list()] == ["c"]
    assert store.search("a") == []
    assert store.add(title="fresh start", kind="gotcha", scope="user").ok


def test_update_keeps_fields_that_are_not_given(store: NoteStore) -> None:
    note = store.add(title="t", body="b", tags=["x", "y"], kind="gotcha", scope="user").note
    assert note is not None
    result = store.update(note.id, title="t2")
    assert result.note is not None
    assert (result.note.body, result.note.tags, result.note.kind) == ("b", ["x", "y"], "gotcha")


def test_missing_names_the_deleted_notes_only(store: NoteStore) -> None:
    """A replayed record is rendered afresh when it holds a deleted note (server/turn/
    fit.py): `missing` names those, and an archived note, whose text may still be
    replayed, is not one of them."""
    kept, archived, deleted = (_ratified(store, title=t, body=f"{t}, always.")
                               for t in ("Answer in French", "Use tabs", "Call me Sam"))
    assert store.archive(archived.id, "outdated").ok
    assert store.delete(deleted.id).ok
    assert store.missing([kept.id, archived.id, deleted.id, "0123456789"]) == {
        deleted.id, "0123456789"}
