"""The prewarm's branches, the bookkeeping and the choice (conductor/hidden/prewarm.py):
which notes a new session may match, most used then newest first, project notes of
another project and session notes never; each branch due once per note version and
shared-context version, at most `notes` a head, and a user's delete forgets them."""

from __future__ import annotations

from conductor.hidden.prewarm import ContextGroup, PrewarmHeads, likely_notes
from conductor.hidden.tail_notes import NotesShown, lone_match_tail
from conductor.notes import NoteStore
from tests.conductor.notes_helpers import FakeClock, add_distinct


def count(text: str) -> int:
    return len(text.split())


def test_likely_notes_are_the_shared_ones_most_used_then_newest(store: NoteStore,
                                                                 clock: FakeClock):
    ids = []
    for i in range(4):
        clock.advance(minutes=1)
        ids.append(add_distinct(store, i).note.id)
    own = add_distinct(store, 9, scope="session", session="s1").note.id
    store.record_injection([ids[1]])
    store.record_injection([ids[1], ids[0]])
    ranked = [n.note_id for n in likely_notes(store, None, limit=10)]
    assert ranked == [ids[1], ids[0], ids[3], ids[2]] and own not in ranked
    assert [n.note_id for n in likely_notes(store, None, limit=2)] == [ids[1], ids[0]]
    assert likely_notes(store, None, limit=0) == []


def test_each_branch_is_due_once_a_version_and_a_head_keeps_at_most_its_share(
        store: NoteStore, clock: FakeClock):
    group = ContextGroup("ann", None, card=True, reads=True)
    heads = PrewarmHeads(notes=2)
    heads.seen(group, (1, 2), version="v1")
    for i in range(3):
        clock.advance(minutes=1)
        add_distinct(store, i)
    likely = likely_notes(store, None, limit=heads.notes)
    due = heads.branches_due(group, "v1", likely)
    assert [b.note.note_id for b in due] == [n.note_id for n in likely] and len(due) == 2
    assert len(heads.branches_due(group, "v1", likely_notes(store, None, limit=9))) == 2
    for branch in due:
        heads.branch_warmed(branch, "v1")
    assert heads.branches_due(group, "v1", likely) == []
    heads.seen(group, (1, 2), version="v1")  # another session on the head: still warm
    assert heads.branches_due(group, "v1", likely) == []
    assert len(heads.branches_due(group, "v2", likely)) == 2  # a new shared context
    clock.advance(minutes=1)
    changed = store.ratify(likely[1].note_id, via="cli")
    assert changed.ok
    again = likely_notes(store, None, limit=heads.notes)
    assert [b.note.note_id for b in heads.branches_due(group, "v1", again)] == [
        likely[1].note_id]
    heads.forget_user("ann")
    assert heads.branches_due(group, "v1", again) == []  # no head left


def test_a_note_over_the_match_budget_has_no_branch(store: NoteStore):
    note = add_distinct(store, 1).note
    shown = NotesShown()
    assert lone_match_tail(note, shown, count) is not None
    assert lone_match_tail(note, NotesShown(match_budget=count(shown.frame) + 2), count) \
        is None


def test_an_unchanged_store_is_ranked_once_for_many_idle_ticks_and_a_change_ranks_it_again(
        store: NoteStore, clock: FakeClock, monkeypatch):
    """The idle loop asks for a group's likely notes every idle second: while no note and
    no use changes, the notes are listed once (red before: once a tick); a use counted, a
    note written and a note's verify_by passing each rank them again (issue 58, item 4)."""
    ids = []
    for i in range(3):
        clock.advance(minutes=1)
        ids.append(add_distinct(store, i).note.id)
    listed: list[dict] = []
    real_list = store.list
    monkeypatch.setattr(store, "list", lambda **kw: listed.append(kw) or real_list(**kw))

    def ranked() -> list[str]:
        return [n.note_id for n in likely_notes(store, None, limit=10)]

    first = ranked()
    for _ in range(5):
        assert ranked() == first
    assert len(listed) == 1
    store.record_injection([ids[0]])  # a use: kept for the write-behind, not yet written
    assert ranked()[0] == ids[0] and len(listed) == 2
    for _ in range(5):
        ranked()
    assert len(listed) <= 3  # once more at most: the use written to usage.json
    settled = len(listed)
    clock.advance(minutes=1)
    new = add_distinct(store, 7, verify_by=clock.now.date().isoformat()).note.id
    assert new in ranked() and len(listed) == settled + 1
    for _ in range(5):
        assert new in ranked()
    assert len(listed) == settled + 1
    clock.advance(days=1)  # its verify_by passed: it leaves the likely notes
    assert new not in ranked() and len(listed) == settled + 2
