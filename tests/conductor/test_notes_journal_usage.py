"""The journal (never a title or a body), usage counts and INDEX.md."""

from __future__ import annotations

import json
import os
import threading
from datetime import timedelta
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from notes_helpers import FakeClock

from conductor.cognition.nightly import run_nightly
from conductor.notes import NoteStore
from conductor.storage.journal import Journal
from conductor.storage.write_behind import AFTER_ANSWER

CANARY_TITLE = "Canarytitle Qz7xw"
CANARY_BODY = "canarybody Vb3kp lives in this body"
CANARY_REASON = "canaryreason Mm4tz"
CANARY_KIND = "canarykind_Pp2rr"


def test_canary_title_and_body_never_appear_in_the_journal(store: NoteStore) -> None:
    note = store.add(
        title=CANARY_TITLE, body=CANARY_BODY, kind="gotcha", scope="user", tags=["canarytag Xy9"]
    ).note
    assert note is not None
    store.add(title=CANARY_TITLE + " again", body=CANARY_BODY, kind="gotcha", scope="user")
    store.update(
        note.id, title=CANARY_TITLE + " two", body=CANARY_BODY + " two", reason=CANARY_REASON
    )
    store.add(title=CANARY_TITLE + "x" * 130, body=CANARY_BODY, kind="gotcha", scope="user")
    store.add(title=CANARY_TITLE, body=CANARY_BODY, kind=CANARY_KIND, scope="user")
    store.add(title=CANARY_TITLE, body=CANARY_BODY, kind="gotcha", scope=CANARY_KIND)
    store.edit(note.id, body=CANARY_BODY + " edited")
    store.search(CANARY_TITLE)
    store.record_injection([note.id], "req-1")
    store.archive(note.id, CANARY_REASON)
    run_nightly(store)
    text = store.layout.journal_path.read_text()
    assert text.count("\n") >= 9
    for canary in (
        "canarytitle",
        "qz7xw",
        "canarybody",
        "vb3kp",
        "canaryreason",
        "mm4tz",
        "canarykind",
        "canarytag",
    ):
        assert canary not in text.lower(), canary


def test_journal_records_writes_refusals_injections_and_nightly(store: NoteStore) -> None:
    note = store.add(title="t", body="b", kind="gotcha", scope="user").note
    assert note is not None
    store.add(title="x" * 121, kind="gotcha", scope="user")
    body = f"key {'sk-' + 'a1' * 15} and many more words around it, so not mostly secret"
    store.add(title="t", body=body, kind="gotcha", scope="user")
    store.record_injection([note.id, "unknown"], "req-7")
    store.ratify(note.id, via="cli")
    run_nightly(store)
    entries = list(store.journal.entries())
    ops = [(e["op"], e["ok"]) for e in entries]
    assert ops == [
        ("add", True),
        ("add", False),
        ("add", True),
        ("inject", True),
        ("ratify", True),
        ("nightly", True),
    ]
    assert entries[0]["id"] == note.id and entries[0]["scope"] == "user"
    assert entries[0]["kind"] == "gotcha" and entries[0]["user"] == "alice"
    assert entries[1]["reason"] == "title_too_long"
    assert entries[2]["revised_existing"] is True and entries[2]["redactions"] == {"openai": 1}
    assert entries[3]["ids"] == [note.id] and entries[3]["request_id"] == "req-7"
    assert entries[4]["by"] == "user" and entries[4]["via"] == "cli"
    assert "counts" in entries[5]


def test_journal_refuses_free_text_keys(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "j.jsonl")
    with pytest.raises(ValueError):
        journal.append(op="add", title="secret title")
    with pytest.raises(ValueError):
        journal.append(op="add", reason="a long\nmultiline text")
    assert not (tmp_path / "j.jsonl").exists()


def test_journal_is_append_only_json_lines(store: NoteStore) -> None:
    store.add(title="a", kind="gotcha", scope="user")
    first = store.layout.journal_path.read_text()
    store.add(title="b", kind="gotcha", scope="user")
    second = store.layout.journal_path.read_text()
    assert second.startswith(first)
    for line in second.splitlines():
        json.loads(line)


def test_newest_first_is_every_entry_in_reverse_whatever_the_block_size(
        tmp_path: Path) -> None:
    journal = Journal(tmp_path / "journal.jsonl")
    assert list(journal.newest_first()) == []  # no file yet
    for n in range(40):
        journal.append(op="inject", ids=[f"n{n}", "é" * (n % 7)], request_id=f"r{n}")
    with journal.path.open("a") as f:
        f.write('{"op": "torn", "ids": ["half\n')  # a crash mid-line, then more entries
    journal.append(op="add", id="after-the-tear")
    expected = list(journal.entries())[::-1]
    assert expected[0]["id"] == "after-the-tear" and len(expected) == 41
    for block in (1, 2, 3, 7, 64, 1 << 16):
        assert list(journal.newest_first(block)) == expected, block


@given(st.lists(st.text(max_size=30), max_size=25), st.integers(1, 50),
       st.booleans())
def test_reading_backwards_yields_the_lines_reading_forwards_does(
        tmp_path_factory, texts: list[str], block: int, torn_end: bool) -> None:
    path = tmp_path_factory.mktemp("j") / "journal.jsonl"
    lines = [json.dumps({"op": "x", "at": t}, ensure_ascii=False) for t in texts]
    content = "\n".join(lines) + ("" if torn_end or not lines else "\n")
    path.write_text(content, encoding="utf-8")
    journal = Journal(path)
    assert list(journal.newest_first(block)) == list(journal.entries())[::-1]


def test_usage_counts_and_uses_in_7_days(store: NoteStore, clock: FakeClock) -> None:
    a = store.add(title="a", kind="gotcha", scope="user").note
    b = store.add(title="b", kind="gotcha", scope="user").note
    assert a is not None and b is not None
    assert store.record_injection([a.id, b.id, "missing"], "r1") == 2
    clock.advance(days=3)
    store.record_injection([a.id], "r2")
    clock.advance(days=5)  # the first use is now 8 days old
    store.record_injection([a.id], "r3")
    assert store.uses_in_days(a.id) == 2
    assert store.uses_in_days(b.id) == 0
    assert store.uses_in_days(a.id, days=30) == 3
    usage = store.usage(a.id)
    assert usage["total"] == 3 and usage["uses_7d"] == 2
    data = json.loads(store.layout.usage_json.read_text())
    assert data["notes"][a.id]["total"] == 3
    assert "missing" not in data["notes"]


@pytest.fixture
def gate():
    """The write-behind thread held until the test sets the gate (set at teardown too)."""
    event = threading.Event()
    AFTER_ANSWER.later(("test-gate", id(event)), event.wait)
    yield event
    event.set()
    AFTER_ANSWER.drain()


def test_an_answers_usage_and_journal_writes_are_batched_behind_the_caller(
        store: NoteStore, monkeypatch, gate: threading.Event) -> None:
    """Issue 58: record_injection ran after every answer in a thread the next turn's work
    waited for, two fsync'd writes each (usage.json rewritten whole, a journal line).
    The caller now does no disk write; the write-behind thread writes a batch of answers
    in one rewrite and one journal write; nothing is lost, and the journal keeps its
    order."""
    notes = [store.add(title=f"n{i}", kind="gotcha", scope="user").note for i in range(3)]
    ids = [n.id for n in notes if n is not None]
    synced, usage_writes = [], []
    real_fsync, real_record_many = os.fsync, type(store._usage).record_many

    def fsync(fd):
        synced.append(threading.current_thread().name)
        return real_fsync(fd)

    def record_many(book, uses):
        usage_writes.append(len(uses))
        return real_record_many(book, uses)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(type(store._usage), "record_many", record_many)
    answers = 50  # while the write-behind thread waits at the gate
    for n in range(answers):
        assert store.record_injection([ids[n % 3], "unknown"], f"req-{n}") == 1
    assert synced == [], "the caller wrote to the disk"  # red before: 2 fsyncs an answer
    gate.set()
    usage = [store.usage(i)["total"] for i in ids]  # a reader sees every use: written first
    assert usage == [17, 17, 16] and sum(usage_writes) == answers
    assert len(usage_writes) <= 2, usage_writes  # one rewrite for the batch (red: 50)
    injected = [e for e in store.journal.entries() if e["op"] == "inject"]
    assert [e["request_id"] for e in injected] == [f"req-{n}" for n in range(answers)]
    assert synced.count(threading.current_thread().name) <= 4  # the reads' flushes, not 100
    store.add(title="after", kind="gotcha", scope="user")  # a direct append after later ones
    store.record_injection([ids[0]], "req-last")
    store.add(title="after again", kind="gotcha", scope="user")
    ops = [(e["op"], e.get("request_id")) for e in store.journal.entries()][-3:]
    assert ops == [("add", None), ("inject", "req-last"), ("add", None)]  # in order


def test_a_deleted_users_kept_journal_entries_are_never_written(
        store: NoteStore, gate: threading.Event) -> None:
    note = store.add(title="n", kind="gotcha", scope="user").note
    assert note is not None
    store.record_injection([note.id], "req-1")
    store.journal.erase_user("alice", op="delete_user", ok=True)
    gate.set()
    AFTER_ANSWER.drain()
    assert [e["op"] for e in store.journal.entries() if e["user"] == "alice"] == [
        "delete_user"]


def test_uses_in_7_days_at_a_given_moment(store: NoteStore, clock: FakeClock) -> None:
    a = store.add(title="a", kind="gotcha", scope="user").note
    assert a is not None
    start = clock.now
    store.record_injection([a.id], "r1")
    assert store.uses_in_days(a.id, now=start + timedelta(days=6)) == 1
    assert store.uses_in_days(a.id, now=start + timedelta(days=8)) == 0


def test_index_md_has_one_line_per_live_note(store: NoteStore) -> None:
    a = store.add(title="Prefers tea", kind="reference", scope="user").note
    b = store.add(title="Use uv", kind="gotcha", scope="project", project="/w/app").note
    c = store.add(
        title="Bisecting",
        kind="program_state",
        scope="session",
        session="s1",
        verify_by="2025-03-11",
    ).note
    gone = store.add(title="Gone", kind="gotcha", scope="user").note
    assert a and b and c and gone
    store.user_archive(gone.id)
    store.record_injection([a.id], "r")
    path = store.regenerate_index()
    text = path.read_text()
    lines = [line for line in text.splitlines() if line.startswith("- ")]
    assert len(lines) == 3
    assert any("Prefers tea" in line and a.id in line and "uses 7d: 1" in line for line in lines)
    assert "Gone" not in text
    assert "## About you" in text and "## Session s1" in text and f"## Project {b.project}" in text


def test_a_users_delete_leaves_other_users_entries_and_loses_no_line_appended_meanwhile(
        tmp_path: Path) -> None:
    """`erase_user` replaces the file while other users' entries are being appended (the
    server goes on serving them): each of those lands in the new file, none in the
    replaced one. The user's own entries go, torn lines naming them too; the records of
    the user's deletes stay."""
    import threading

    path = tmp_path / "journal.jsonl"
    journal = Journal(path)
    journal.append(user="alice", op="add", ok=True, id="n1")
    path.open("a").write('{"user": "alice", "op": "ad')  # torn by a crash
    journal.append(user="alicea", op="add", ok=True, id="n2")  # another user, one letter on
    appended = 300
    done = threading.Event()

    def bob() -> None:
        for i in range(appended):
            Journal(path).append(user="bob", op="add", ok=True, id=f"b{i}")
        done.set()

    writer = threading.Thread(target=bob)
    writer.start()
    gone = [journal.erase_user("alice", op="delete_user", ok=True, counts={"notes": 1})]
    while not done.is_set():
        journal.append(user="alice", op="inject", ok=True, ids=["n1"])
        gone.append(journal.erase_user("alice", op="delete_user", ok=True,
                                       counts={"notes": 0}))
    writer.join()
    read = journal.read()
    assert read.torn == 0 and gone[0] == 2 and len(gone) > 3
    assert sum(e["user"] == "bob" for e in read.entries) == appended
    alice = [e for e in read.entries if e["user"] == "alice"]
    assert {e["op"] for e in alice} == {"delete_user"} and len(alice) == len(gone)
    assert [e["id"] for e in read.entries if e["user"] == "alicea"] == ["n2"]
