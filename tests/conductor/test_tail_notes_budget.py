"""The index and matching-notes budgets, on notes built in memory."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from conductor.hidden.tail_notes import NotesShown, build_index, content_words
from conductor.notes.note_format import Note

# What every profile showed before `tandem bench --index`: three matches under a header
BEFORE = NotesShown(index_budget=1500, max_matches=3, note_format="header",
                    match_frame="full")


def words(text: str) -> int:
    return len(text.split())


def note(n: int, kind: str = "reference", **extra) -> Note:
    return Note(id=f"n{n:03d}", title=f"note number {n} " + "word " * 20, kind=kind,
                scope="user", updated=datetime(2026, 1, 1, tzinfo=UTC) + timedelta(days=n),
                **extra)


def test_the_index_stays_within_its_budget_keeping_pinned_then_ratified_then_recent():
    notes = [note(n) for n in range(100)]
    notes[5] = note(5, kind="rule", status="ratified", pinned=True)
    notes[7] = note(7, status="ratified")
    index = build_index(notes, words, budget=300)
    assert words(index.text) <= 300
    assert index.note_ids[:2] == ("n005", "n007")
    assert index.note_ids[2:5] == ("n099", "n098", "n097")  # then the most recent
    assert len(index.note_ids) < 100


def test_no_notes_means_no_index():
    assert build_index([], words) is None


def test_content_words_drop_stopwords_and_case():
    assert content_words("How is THE pnpm Workspace set up?") == {"pnpm", "workspace", "set",
                                                                  "up"}


def test_matching_notes_stay_within_their_budget(tmp_path):
    from conductor.hidden.tail_notes import MATCH_BUDGET, build_matches
    from conductor.notes import NoteStore

    store = NoteStore(tmp_path / "memory", "tester")
    topics = ["alpha", "bravo", "charlie"]
    for topic in topics:
        body = f"kafka consumer lag on {topic} " + " ".join(f"{topic}{i}" for i in range(250))
        assert store.add(title=f"kafka consumer lag {topic}", body=body, kind="gotcha",
                         scope="user", source="cli").ok
    found = build_matches(store, "why is the kafka consumer lag high", store.list(), set(),
                          words, BEFORE)
    assert found is not None and len(found.note_ids) == 2  # a third would pass 600 words
    assert words(found.text) <= MATCH_BUDGET
    assert build_matches(store, "why is the kafka consumer lag high", store.list(),
                         set(found.note_ids), words, BEFORE).note_ids not in (found.note_ids,)


def test_an_index_budget_of_zero_shows_no_index():
    assert build_index([note(1), note(2)], words, budget=0) is None


def _store_with_lag_notes(tmp_path, count: int):
    from conductor.notes import NoteStore

    store = NoteStore(tmp_path / "memory", "tester")
    for n in range(count):
        assert store.add(title=f"kafka consumer lag {n}", body=f"kafka consumer lag fix {n}",
                         kind="gotcha", scope="user", source="cli").ok
    return store


def test_by_default_a_note_shows_as_a_statement_without_its_id(tmp_path):
    from conductor.hidden.tail_notes import build_matches

    store = _store_with_lag_notes(tmp_path, 1)
    header = build_matches(store, "kafka consumer lag again", store.list(), set(), words,
                           NotesShown(note_format="header"))
    plain = build_matches(store, "kafka consumer lag again", store.list(), set(), words)
    note_id = header.note_ids[0]
    assert f"[{note_id}] kafka consumer lag 0 (gotcha, provisional)" in header.text
    assert "kafka consumer lag 0: kafka consumer lag fix 0" in plain.text
    assert note_id not in plain.text and plain.note_ids == header.note_ids


def test_max_matches_caps_the_matching_notes_and_zero_shows_none(tmp_path):
    from conductor.hidden.tail_notes import build_matches

    store = _store_with_lag_notes(tmp_path, 4)
    ask = "kafka consumer lag again"
    assert len(build_matches(store, ask, store.list(), set(), words, BEFORE).note_ids) == 3
    one = build_matches(store, ask, store.list(), set(), words)  # the default: one
    assert len(one.note_ids) == 1
    assert build_matches(store, ask, store.list(), set(), words,
                         NotesShown(max_matches=0)) is None


def test_the_short_frame_costs_fewer_tokens_before_the_same_notes(tmp_path):
    from conductor.hidden.tail_notes import build_matches

    store = _store_with_lag_notes(tmp_path, 2)
    ask = "kafka consumer lag again"
    full = build_matches(store, ask, store.list(), set(), words, BEFORE)
    short = build_matches(store, ask, store.list(), set(), words,
                          NotesShown(max_matches=3, note_format="header", match_frame="short"))
    assert short.note_ids == full.note_ids
    assert words(full.text) - words(short.text) >= 30
    assert short.text.endswith(full.text[full.text.index("[") :])


def test_notes_shown_refuses_a_negative_size_or_an_unknown_format():
    import pytest

    with pytest.raises(ValueError):
        NotesShown(index_budget=-1)
    with pytest.raises(ValueError):
        NotesShown(note_format="fancy")
    with pytest.raises(ValueError):
        NotesShown(match_frame="long")


def _notes_of_a_user(tmp_path):
    from conductor.notes import NoteStore

    store = NoteStore(tmp_path, "tester")
    for title, body in [("user's dog", "The user has a dog called Biscuit, a beagle."),
                        ("user's birthday", "The user's birthday is on 14 March."),
                        ("migrations need a lock", "Run migrations only after taking the "
                         "deploy lock with `quayctl lock`."),
                        ("laptop name", "The user's laptop is named otter."),
                        ("release branch name", "Releases are cut from release/stable.")]:
        assert store.add(title=title, body=body, kind="reference", scope="user", source="cli",
                         has_user_message=True).ok
    return store


def test_a_question_matches_by_stems_and_by_the_one_word_that_names_the_note(tmp_path):
    """Issue 60: "What is my dog's name?" shares no word with "user's dog" as written (the
    question says "dog's") and one stem ("dog") once stemmed as the index stems it; that
    one word names the note (its title), the note is the best hit and the question is
    the user's about their own things, so it matches. "name" says what kind of question
    it is, not what it is about (laptop name, release branch name)."""
    from conductor.hidden.tail_notes import build_matches

    store = _notes_of_a_user(tmp_path)
    for question, title in [("What is my dog's name?", "user's dog"),
                            ("When is my birthday?", "user's birthday"),
                            ("What must I do before running migrations?",
                             "migrations need a lock")]:
        found = build_matches(store, question, store.list(), set(), words)
        assert found is not None, question
        (note_id,) = found.note_ids
        assert store.get(note_id).title == title


def test_one_shared_word_alone_pulls_no_note_into_a_message(tmp_path):
    """The look-alikes: one shared word that does not name the note's subject for the
    user ("birthday party ideas" is not about the user's birthday; "name" is a frame
    word), or a memory verb ("remember", "update"), brings no note."""
    from conductor.hidden.tail_notes import build_matches

    store = _notes_of_a_user(tmp_path)
    for message in ["Give me three ideas for a birthday party.",
                    "What's a good name for a sailboat?",
                    "Can you tell me a story about a robot who could not remember its name?",
                    "Please update the migrations guide in the docs."]:
        assert build_matches(store, message, store.list(), set(), words) is None, message
