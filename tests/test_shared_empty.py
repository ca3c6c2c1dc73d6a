"""A record laid out without a shared context because there was nothing to show (a new
user: no note yet, and no card for the request) is replayed as it is when the first note
appears: only a shared context that gave way to fit the context comes back afresh
(server/turn/fit.py; the gave-way path: tests/test_prompt_fit.py). The new note reaches
the replayed conversation as a matched note, the way a note written after a record's
shared context reaches it."""

from __future__ import annotations

import uuid

import pytest

from conductor.ledger.files import decode_record, encode_record
from conductor.ledger.records import Record
from tests.inprocess import WITH_INDEX, InProcessApp

READ = {"X-Tandem-Memory": "read"}  # no card: the shared context is the index alone
FIRST = ("We are planning the garden for the spring. " + " ".join(
    f"step {i}: weed the beds, then water them" for i in range(60)))
BLOCK = ('Noted. <tandem_memory op="add" scope="user" kind="reference">\ntitle: the kettle '
         'is blue\n\nThe user keeps a blue kettle on the left of the stove.\n</tandem_memory>')


@pytest.fixture
def app(served, tmp_path) -> InProcessApp:
    """An index in the shared context, as the GPU profiles show it."""
    return InProcessApp(served, tmp_path, memory_changes=WITH_INDEX)


def whole_blocks(record: Record, block: int) -> int:
    """Every full block of a record's ids but the last token's (vLLM never serves a
    prompt's last token from the cache)."""
    return (len(record.ids) - 1) // block * block


def test_the_first_note_leaves_a_conversation_without_a_shared_context_replayed(
        app, tiny_profile):
    session = {"X-Tandem-Session": f"empty-{uuid.uuid4().hex[:6]}", **READ}
    first = [{"role": "user", "content": FIRST}]
    content, usage, _ = app.chat(first, "Fine, the beds first.", headers=session)
    one = app.memory.latest_record("tester", session["X-Tandem-Session"])
    assert not [s for s in one.spans if s.kind == "shared"]  # nothing to show: no notes
    # The user's first note, written in another conversation of theirs
    app.chat([{"role": "user", "content": "Remember that the garden hose is in the shed."}],
             "Okay.", headers={"X-Tandem-Session": f"other-{uuid.uuid4().hex[:6]}"})
    (note,) = app.memory.store("tester").list()
    second = [*first, {"role": "assistant", "content": content},
              {"role": "user", "content": "Where is the garden hose?"}]
    _, later, _ = app.chat(second, "In the shed.", headers=session)
    cached = later["prompt_tokens_details"]["cached_tokens"]
    print(f"turn one {usage['prompt_tokens']}+{usage['completion_tokens']}, "
          f"turn two {cached} of {later['prompt_tokens']} cached")
    assert cached >= whole_blocks(one, tiny_profile.block_size) > 0
    assert one.shared_empty
    two = app.memory.latest_record("tester", session["X-Tandem-Session"])
    assert list(two.ids[:len(one.ids)]) == list(one.ids)  # turn one replayed as it was
    # the new note reaches the model all the same: matched to the message, in a tail
    assert any(note.id in s.note_ids for s in two.spans if s.kind == "notes"), two.spans
    assert two.shared_empty  # and the next turn replays this one too


def test_a_new_users_first_turn_that_writes_a_note_stays_cached(app, tiny_profile):
    """With the card (memory writes), a shared context is never empty: turn one's block
    writes the user's first note and turn two replays turn one whole."""
    session = {"X-Tandem-Session": f"writes-{uuid.uuid4().hex[:6]}"}
    first = [{"role": "user", "content": FIRST}]
    content, usage, _ = app.chat(first, BLOCK, headers=session)
    assert "› remembered: the kettle is blue" in content
    one = app.memory.latest_record("tester", session["X-Tandem-Session"])
    assert [s for s in one.spans if s.kind == "shared"] and not one.shared_empty
    second = [*first, {"role": "assistant", "content": content},
              {"role": "user", "content": "What first?"}]
    _, later, _ = app.chat(second, "The beds.", headers=session)
    assert later["prompt_tokens_details"]["cached_tokens"] >= whole_blocks(
        one, tiny_profile.block_size)


def test_the_flag_is_saved_and_a_record_saved_without_it_loads_as_before():
    record = Record(user="u", session="s", messages=(), ids=[1, 2, 3], ended_cleanly=True,
                    shared_flags=(False, True), shared_empty=True)
    saved = encode_record(record)
    assert decode_record("u", "s", saved).shared_empty
    del saved["shared_empty"]  # a file saved before the flag was kept
    assert not decode_record("u", "s", saved).shared_empty  # its shared context may come back
    plain = encode_record(Record(user="u", session="s", messages=(), ids=[1],
                                 ended_cleanly=True))
    assert "shared_empty" not in plain and not decode_record("u", "s", plain).shared_empty


def add_shelf_notes(store, count: int, **scope) -> None:
    for _ in range(count):
        n = len(store.list())
        assert store.add(title=f"greenhouse shelf {n} holds seed tray {n}",
                         body=f"Seed tray {n} sits on greenhouse shelf {n}.",
                         kind="reference", source="cli", has_user_message=True,
                         **scope).ok


def test_a_conversations_own_notes_do_not_count_toward_the_index_it_would_get(
        app, tiny_profile):
    """Session notes are never in the index (they reach the session as its tail): eight of
    them leave a conversation begun with nothing to show replayed as it was."""
    from server.turn.fit import EMPTY_INDEX_KEPT_UNDER

    name = f"own-{uuid.uuid4().hex[:6]}"
    session = {"X-Tandem-Session": name, **READ}
    first = [{"role": "user", "content": FIRST}]
    content, _, _ = app.chat(first, "Beds first.", headers=session)
    one = app.memory.latest_record("tester", name)
    add_shelf_notes(app.memory.store("tester"), EMPTY_INDEX_KEPT_UNDER, scope="session",
                    session=name)
    _, later, _ = app.chat([*first, {"role": "assistant", "content": content},
                            {"role": "user", "content": "And then?"}], "Water.",
                           headers=session)
    two = app.memory.latest_record("tester", name)
    assert two.shared_empty and not [s for s in two.spans if s.kind == "shared"]
    assert list(two.ids[:len(one.ids)]) == list(one.ids)
    assert later["prompt_tokens_details"]["cached_tokens"] >= whole_blocks(
        one, tiny_profile.block_size)


def test_a_conversation_begun_without_an_index_gets_it_once_it_would_list_many_notes(
        app, tiny_profile):
    """Kept as it is while the notes are few; at EMPTY_INDEX_KEPT_UNDER the session pays
    one miss for the index (before, it never saw one in its life), then replays again."""
    from server.turn.fit import EMPTY_INDEX_KEPT_UNDER

    session = {"X-Tandem-Session": f"grows-{uuid.uuid4().hex[:6]}", **READ}
    store = app.memory.store("tester")

    def add_notes(count: int) -> None:
        add_shelf_notes(store, count, scope="user")

    messages = [{"role": "user", "content": FIRST}]
    records = []
    for turn, (notes, answer) in enumerate([(0, "Beds first."), (EMPTY_INDEX_KEPT_UNDER - 1,
                                            "Then water."), (1, "Then rest."),
                                            (0, "Done.")]):
        add_notes(notes)
        content, usage, _ = app.chat(messages, answer, headers=session)
        records.append((app.memory.latest_record("tester", session["X-Tandem-Session"]),
                        usage["prompt_tokens_details"]["cached_tokens"]))
        messages = [*messages, {"role": "assistant", "content": content},
                    {"role": "user", "content": f"And after step {turn}?"}]
    shared = [[s for s in record.spans if s.kind == "shared"] for record, _ in records]
    assert shared[0] == [] and shared[1] == []  # nothing, then a few notes: kept as it was
    assert records[1][0].shared_empty and records[1][1] >= whole_blocks(
        records[0][0], tiny_profile.block_size)
    assert shared[2] and not records[2][0].shared_empty  # the index, laid out afresh
    index = shared[2][0]
    assert len(index.note_ids) == EMPTY_INDEX_KEPT_UNDER
    # and the turn after replays the new layout from the cache
    assert records[3][1] >= whole_blocks(records[2][0], tiny_profile.block_size)
    assert shared[3] == shared[2]
