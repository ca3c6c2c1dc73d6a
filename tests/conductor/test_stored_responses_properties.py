"""The Responses store under any order of saves, continuations and deletes, with items of
any size (issue 53): a user's bytes stay within the bound (the file just written aside),
every stored response reads back its whole conversation or says an earlier one was
dropped, a deleted one is never found, and nothing else is ever raised."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conductor.ledger.stored_responses import (
    ChainBroken,
    ResponseStore,
    StoredResponse,
    new_response_id,
)

MAX_BYTES = 6_000
STEP = st.tuples(st.sampled_from(["new", "continue", "continue", "delete"]),
                 st.integers(min_value=0, max_value=10_000),  # which response
                 st.integers(min_value=0, max_value=2_500),  # the item's size
                 st.booleans())  # an empty answer


def expected_conversation(model: dict, response_id: str) -> list:
    parent, items, output = model[response_id]
    before = [] if parent is None else expected_conversation(model, parent)
    answer = output or [{"type": "message", "role": "assistant",
                         "content": [{"type": "output_text", "text": ""}]}]
    return [*before, *items, *answer]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(STEP, min_size=1, max_size=25))
def test_any_sequence_keeps_the_bound_and_reads_back_whole_or_says_why(steps):
    with tempfile.TemporaryDirectory() as root:
        store = ResponseStore(Path(root), max_bytes=MAX_BYTES)
        model: dict[str, tuple] = {}  # id -> (parent, items, output), what was said
        deleted: set[str] = set()
        for op, pick, size, empty in steps:
            live = [i for i in model if i not in deleted]
            if op == "delete" and live:
                gone = live[pick % len(live)]
                store.delete("u", gone)
                deleted.add(gone)
                continue
            parent = live[pick % len(live)] if op == "continue" and live else None
            if parent is not None and store.load("u", parent, resolve=False) is None:
                parent = None  # dropped for room: the route would have refused it
            response_id = new_response_id()
            items = [{"type": "message", "role": "user", "content": "x" * size}]
            output = [] if empty else [{"type": "message", "text": f"answer {len(model)}"}]
            model[response_id] = (parent, items, output)
            store.save("u", StoredResponse({"id": response_id, "output": output}, [],
                                           parent=parent, items=items))
            assert store.load("u", response_id, resolve=False) is not None  # never dropped
            written = (store._user_folder("u") / f"{response_id}.json").stat().st_size
            assert store.stored_bytes("u") <= MAX_BYTES + written
        for response_id in model:
            try:
                found = store.load("u", response_id)
            except ChainBroken:
                assert response_id not in deleted
                continue
            if response_id in deleted:
                assert found is None
            elif found is not None:  # None: dropped for room
                assert found.conversation == expected_conversation(model, response_id)


def test_a_stored_file_of_the_first_format_still_loads_and_continues(tmp_path: Path):
    """Format 1 held each response's whole context: such a file loads as a conversation's
    start, and a continuation of it stores only its own items."""
    store = ResponseStore(tmp_path)
    old = new_response_id()
    folder = store._user_folder("alice")
    folder.mkdir(parents=True)
    context = [{"type": "message", "role": "user", "content": "one"}]
    (folder / f"{old}.json").write_text(json.dumps({"version": 1, "context": context, "response": {
        "id": old, "status": "completed", "output": [{"type": "message", "text": "1"}]}}))
    assert store.load("alice", old).conversation == [*context, {"type": "message",
                                                                "text": "1"}]
    new = new_response_id()
    said = [{"type": "message", "role": "user", "content": "two"}]
    store.save("alice", StoredResponse({"id": new, "output": []}, [], parent=old, items=said))
    assert store.load("alice", new).context == [*context, {"type": "message", "text": "1"},
                                                *said]
