"""A full disk or a memory folder turned read-only: the note write is refused with a
clear line in the answer, the answer is served whole, nothing is half-written, and the
log names neither the note's title nor its file.

The failure is the real errno raised where the write would meet it (conductor/storage/faults.py):
running as root here, a chmod would not stop a write, and a real full disk would stop
the whole machine's test run.
"""

from __future__ import annotations

import logging

import pytest

from conductor.storage.faults import TEMP_OPEN, TEMP_PARTIAL, arm
from tests.inprocess import InProcessApp

TITLE = "Staging database port"
BLOCK = ('<tandem_memory op="add" scope="user" kind="reference">\ntitle: ' + TITLE + '\n\n'
         'Staging runs Postgres on port 5433.\n</tandem_memory>')
ANSWER = "Staging listens on 5433."


@pytest.mark.parametrize(("fault", "says"), [
    (f"note:{TEMP_PARTIAL}:enospc", "No space left on device"),
    (f"note:{TEMP_OPEN}:erofs", "Read-only file system"),
], ids=["disk-full", "read-only"])
def test_a_failed_note_write_is_said_in_the_answer_and_leaves_nothing_half_written(
        served, tmp_path, caplog, fault, says):
    home = tmp_path / "home"
    app = InProcessApp(served, home)
    messages = [{"role": "user", "content": "remember the staging port"}]
    caplog.set_level(logging.DEBUG)
    arm(fault)
    try:
        content, _, response = app.chat(messages, f"{ANSWER}\n{BLOCK}")
    finally:
        arm(None)
    assert response.status_code == 200
    assert content.startswith(ANSWER), "the answer is served"
    assert f"› not remembered: {TITLE} ({says})" in content
    assert "Staging runs Postgres on port 5433." in content, "the block is shown, not lost"
    store = app.memory.store("tester")
    assert store.list(state="all") == [], "no note, not half of one"
    assert [p for p in (home / "memory").rglob(".*.tmp")] == [], "no temp file left"
    logged = "\n".join(r.getMessage() + (r.exc_text or "") for r in caplog.records)
    assert TITLE not in logged and "staging-database-port" not in logged

    _, _, again = app.chat(messages, f"{ANSWER}\n{BLOCK}")  # the disk has room again
    assert again.status_code == 200
    assert [n.title for n in store.list()] == [TITLE]
