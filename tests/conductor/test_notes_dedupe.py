"""An add of a fact already stored becomes a revision of that note."""

from __future__ import annotations

from pathlib import Path

import pytest
from dedupe_pairs import BASE, PROBES
from notes_helpers import read_front

from conductor.notes import NoteStore
from conductor.notes.dedupe import DEDUPE_THRESHOLD


def test_same_normalised_title_turns_the_add_into_a_revision(store: NoteStore) -> None:
    first = store.add(
        title="Run tests with make test", body="It wraps pytest.", kind="runbook", scope="user"
    )
    assert first.ok and first.note is not None
    again = store.add(
        title="  run TESTS with make-test! ",
        body="Use `make test -j4`.",
        kind="runbook",
        scope="user",
    )
    assert again.ok and again.revised_existing and again.note is not None
    assert again.note.id == first.note.id
    assert again.note.revision == 2
    assert again.note.body == "Use `make test -j4`."
    revision = store.layout.revision_path(first.note.id, 1)
    assert revision.exists()
    assert "It wraps pytest." in revision.read_text()
    assert read_front(revision)["revision"] == 1
    assert len(store.list()) == 1


def test_close_bm25_match_turns_the_add_into_a_revision(store: NoteStore) -> None:
    base = store.add(
        title="Staging database runs PostgreSQL 15 on port 5433",
        body="The staging database is PostgreSQL 15 listening on port 5433 on host db-staging.",
        kind="reference",
        scope="project",
        project="/srv/app",
    )
    assert base.note is not None
    again = store.add(
        title="Staging Postgres listens on 5433",
        body="The staging PostgreSQL 15 database on db-staging listens on port 5433.",
        kind="reference",
        scope="project",
        project="/srv/app",
    )
    assert again.ok and again.revised_existing
    assert again.note is not None and again.note.id == base.note.id
    assert store.layout.revision_path(base.note.id, 1).exists()
    assert again.note.title == "Staging Postgres listens on 5433"


def test_another_fact_on_the_same_topic_is_a_new_note(store: NoteStore) -> None:
    store.add(
        title="Staging database runs PostgreSQL 15 on port 5433",
        body="The staging database is PostgreSQL 15 on port 5433.",
        kind="reference",
        scope="user",
    )
    other = store.add(
        title="Staging database is reset every Sunday",
        body="It is restored from a snapshot every Sunday night.",
        kind="reference",
        scope="user",
    )
    assert other.ok and not other.revised_existing
    assert len(store.list()) == 2


def test_dedupe_only_searches_the_same_scope(store: NoteStore) -> None:
    store.add(
        title="Use tabs", body="Indent with tabs.", kind="gotcha", scope="project", project="/a/one"
    )
    elsewhere = store.add(
        title="Use tabs", body="Indent with tabs.", kind="gotcha", scope="project", project="/b/one"
    )
    in_user = store.add(title="Use tabs", body="Indent with tabs.", kind="gotcha", scope="user")
    session = store.add(
        title="Use tabs", body="Indent with tabs.", kind="gotcha", scope="session", session="s1"
    )
    assert not (elsewhere.revised_existing or in_user.revised_existing or session.revised_existing)
    assert len(store.list()) == 4


def test_archived_notes_are_not_revived_by_dedupe(store: NoteStore) -> None:
    first = store.add(title="Use tabs", body="Indent with tabs.", kind="gotcha", scope="user")
    assert first.note is not None
    store.archive(first.note.id, "wrong")
    again = store.add(title="Use tabs", body="Indent with tabs.", kind="gotcha", scope="user")
    assert again.ok and not again.revised_existing and again.note is not None
    assert again.note.id != first.note.id


def test_identical_add_is_a_no_op_revision(store: NoteStore) -> None:
    first = store.add(title="Use tabs", body="Indent with tabs.", kind="gotcha", scope="user")
    again = store.add(title="Use tabs", body="Indent with tabs.", kind="gotcha", scope="user")
    assert again.revised_existing and again.note is not None and first.note is not None
    assert again.note.revision == 1
    assert not store.layout.revision_path(first.note.id, 1).exists()


@pytest.fixture(scope="module")
def labelled_ratios(tmp_path_factory: pytest.TempPathFactory) -> list[tuple[str, float, bool]]:
    """(label, best normalised BM25 ratio, best match is the base note) for every probe."""
    store = NoteStore(Path(tmp_path_factory.mktemp("dedupe")) / "memory", "eval")
    ids = []
    for title, body, tags in BASE:
        result = store.add(title=title, body=body, tags=tags, kind="reference", scope="user")
        assert result.ok and not result.revised_existing and result.note is not None
        ids.append(result.note.id)
    rows = []
    for base, label, title, body, tags in PROBES:
        match = store.dedupe_match(title=title, body=body, tags=tags, scope="user")
        assert match is not None
        rows.append((label, match[1], match[0].id == ids[base]))
    return rows


def test_every_restatement_finds_its_note_above_the_threshold(
    labelled_ratios: list[tuple[str, float, bool]],
) -> None:
    dups = [r for r in labelled_ratios if r[0] == "dup"]
    assert len(dups) == len(BASE)
    assert all(found and ratio >= DEDUPE_THRESHOLD for _, ratio, found in dups)
    # BM25 finds candidates; the different-fact check guards the merge. The threshold
    # still leaves room below the weakest restatement.
    assert DEDUPE_THRESHOLD < min(r for _, r, _ in dups) - 0.05


def test_no_other_fact_on_the_same_topic_is_merged(tmp_path: Path) -> None:
    """End to end through add: each `new` probe of the first labelled set stays a note of
    its own, each `dup` probe revises its base note."""
    for base, label, title, body, tags in PROBES:
        store = NoteStore(tmp_path / f"{base}-{label}" / "memory", "eval")
        for t, b, tg in BASE:
            store.add(title=t, body=b, tags=tg, kind="reference", scope="user")
        result = store.add(title=title, body=body, tags=tags, kind="reference", scope="user")
        assert result.ok and result.revised_existing == (label == "dup"), (label, title)
