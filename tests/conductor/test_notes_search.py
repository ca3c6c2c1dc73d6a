"""BM25 search with scores and filters."""

from __future__ import annotations

import pytest

from conductor.notes import NoteStore


@pytest.fixture
def filled(store: NoteStore) -> dict[str, str]:
    def add(**kw: object) -> str:
        result = store.add(**kw)  # type: ignore[arg-type]
        assert result.ok and result.note is not None and not result.revised_existing
        return result.note.id

    ids = {
        "tea": add(
            title="User drinks green tea",
            body="No sugar, no milk.",
            kind="reference",
            scope="user",
            tags=["food"],
        ),
        "pytest": add(
            title="Run pytest with -n auto",
            body="xdist speeds up the tests.",
            kind="runbook",
            scope="project",
            project="/w/app",
        ),
        "pytest_other": add(
            title="Pytest fixtures live in conftest",
            body="Shared fixtures.",
            kind="reference",
            scope="project",
            project="/w/lib",
        ),
        "session": add(
            title="Currently bisecting the pytest failure",
            body="At commit abc.",
            kind="program_state",
            scope="session",
            session="s9",
            verify_by="2025-03-11",
        ),
        "rule": add(
            title="Never run the full pytest suite on battery",
            body="Too slow.",
            kind="rule",
            scope="user",
            has_user_message=True,
        ),
    }
    store.ratify(ids["rule"])
    return ids


def test_search_returns_notes_with_bm25_scores_best_first(
    store: NoteStore, filled: dict[str, str]
) -> None:
    hits = store.search("green tea")
    assert hits and hits[0][0].id == filled["tea"]
    assert all(isinstance(score, float) and score > 0 for _, score in hits)
    scores = [s for _, s in store.search("pytest")]
    assert scores == sorted(scores, reverse=True)


def test_search_stems_words(store: NoteStore, filled: dict[str, str]) -> None:
    assert store.search("drinking teas")[0][0].id == filled["tea"]


def test_search_filters(store: NoteStore, filled: dict[str, str]) -> None:
    def ids(**kw: object) -> set[str]:
        return {n.id for n, _ in store.search("pytest", **kw)}  # type: ignore[arg-type]

    assert ids() == {filled["pytest"], filled["pytest_other"], filled["session"], filled["rule"]}
    assert ids(scope="project") == {filled["pytest"], filled["pytest_other"]}
    assert ids(project="/w/app") == {filled["pytest"]}
    assert ids(kind="rule") == {filled["rule"]}
    assert ids(status="ratified") == {filled["rule"]}
    assert ids(session="s9") == {filled["session"]}
    assert ids(scope="user", kind="runbook") == set()


def test_project_filter_takes_a_key_or_a_path(store: NoteStore, filled: dict[str, str]) -> None:
    key = store.get(filled["pytest"]).project  # type: ignore[union-attr]
    assert key is not None
    assert {n.id for n, _ in store.search("pytest", project=key)} == {filled["pytest"]}
    assert [n.id for n in store.list(project=key)] == [filled["pytest"]]


def test_search_live_archived_or_all(store: NoteStore, filled: dict[str, str]) -> None:
    store.user_archive(filled["pytest"])
    live = {n.id for n, _ in store.search("pytest")}
    archived = {n.id for n, _ in store.search("pytest", state="archived")}
    everything = {n.id for n, _ in store.search("pytest", state="all")}
    assert filled["pytest"] not in live
    assert archived == {filled["pytest"]}
    assert everything == live | archived


def test_search_limit(store: NoteStore, filled: dict[str, str]) -> None:
    assert len(store.search("pytest", limit=2)) == 2


@pytest.fixture
def syntax_note(store: NoteStore, filled: dict[str, str]) -> str:
    """A note whose words are tantivy's query operators, prefixes and brackets."""
    result = store.add(
        title="Postgres columns marked NOT NULL",
        body="Filters combine with AND and OR; title: prefix, +required -excluded "
        "(grouped) [range] {braces} fuzzy~ boost^2 wild* in a query language.",
        kind="reference",
        scope="user",
    )
    assert result.ok and result.note is not None and not result.revised_existing
    return result.note.id


@pytest.mark.parametrize(
    "query",
    ["AND OR NOT", "NOT NULL", 'title:"postgres', "postgres -excluded", "+required",
     "(grouped)", "[range", "{braces}", "fuzzy~", "boost^2", "wild*"],
)
def test_query_text_is_never_query_syntax(
    store: NoteStore, syntax_note: str, query: str
) -> None:
    """Operators, field prefixes, quotes and brackets are searched as the words they hold."""
    hits = store.search(query)
    assert hits and hits[0][0].id == syntax_note


def test_and_between_words_is_a_word_not_a_conjunction(
    store: NoteStore, filled: dict[str, str], syntax_note: str
) -> None:
    assert {n.id for n, _ in store.search("columns AND tea")} == {syntax_note, filled["tea"]}


@pytest.mark.parametrize("query", ["", "   ", "!!!", "*", "a" * 60])
def test_a_query_without_a_searchable_word_finds_nothing(
    store: NoteStore, syntax_note: str, query: str
) -> None:
    """Not everything: ``*`` is no wildcard, and a word too long to index matches no note."""
    assert store.search(query) == []


def test_search_sees_status_changes(store: NoteStore, filled: dict[str, str]) -> None:
    store.ratify(filled["tea"])
    assert {n.id for n, _ in store.search("tea", status="ratified")} == {filled["tea"]}


def test_list_filters_and_order(store: NoteStore, filled: dict[str, str], clock) -> None:
    clock.advance(minutes=1)
    store.ratify(filled["pytest_other"])
    listed = store.list()
    assert listed[0].id == filled["pytest_other"]
    assert {n.id for n in store.list(scope="session")} == {filled["session"]}
    assert {n.id for n in store.list(status="ratified")} == {filled["rule"], filled["pytest_other"]}


def test_stale_notes_can_be_left_out(store: NoteStore, filled: dict[str, str], clock) -> None:
    assert {n.id for n in store.list(scope="session")} == {filled["session"]}
    clock.advance(days=2)  # past verify_by 2025-03-11
    assert store.list(scope="session", include_stale=False) == []
    assert store.search("bisecting", include_stale=False) == []
    assert [n.id for n, _ in store.search("bisecting")] == [filled["session"]]


def test_the_index_fingerprint_is_read_once_while_the_index_stands(
    store: NoteStore, filled: dict[str, str], root, clock, monkeypatch
) -> None:
    """Issue 58: fingerprint.json was read and parsed before every search. It is read again
    only when the index changed (meta.json replaced by a commit, this process's or
    another's), and a write through another store object is still found at once."""
    index_type = type(store._index)
    reads = []
    real = index_type.stored_fingerprint

    def counted(self):
        reads.append(self)
        return real(self)

    monkeypatch.setattr(index_type, "stored_fingerprint", counted)
    store.search("tea")
    reads.clear()
    for _ in range(20):
        assert [n.id for n, _ in store.search("green tea")] == [filled["tea"]]
    assert reads == []  # red before: one read a search
    other = NoteStore(root, "alice", clock=clock)  # another process on the same folder
    added = other.add(title="User drinks oolong tea on Fridays", body="Loose leaf.",
                      kind="reference", scope="user")
    assert added.ok and added.note is not None
    found = [n.id for n, _ in store.search("oolong tea")]
    assert found and found[0] == added.note.id
    assert reads  # the index changed under it: the fingerprint was read again
