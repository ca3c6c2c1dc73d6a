"""Concurrent writers, in one process and in two, lose no note."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

from notes_helpers import add_distinct

from conductor.notes import NoteStore

REPO = Path(__file__).resolve().parents[2]
HELPERS = Path(__file__).resolve().parent

# Each worker imports, opens the store, says "ready" and blocks on stdin; the test sends
# "go" only when both are ready (a barrier), so their writes really run at the same time.
WORKER = """
import sys, time
from pathlib import Path
sys.path[:0] = [{repo!r}, {helpers!r}]
from conductor.notes import NoteStore
from notes_helpers import add_distinct
root, offset = Path(sys.argv[1]), int(sys.argv[2])
store = NoteStore(root, "alice")
print("ready", flush=True)
assert sys.stdin.readline() == "go\\n"
first = time.time()
for i in range(offset, offset + {count}):
    result = add_distinct(store, i)
    assert result.ok and not result.revised_existing, result
print(first, time.time(), flush=True)
"""


def test_two_processes_adding_at_once_lose_no_note(root: Path) -> None:
    count = 10
    NoteStore(root, "alice")  # create the tree before the race
    script = WORKER.format(repo=str(REPO), helpers=str(HELPERS), count=count)
    workers = [
        subprocess.Popen(
            [sys.executable, "-c", script, str(root), str(offset)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for offset in (0, 1000)
    ]
    try:
        for worker in workers:  # the barrier: both are up and waiting
            assert worker.stdout is not None and worker.stderr is not None
            line = worker.stdout.readline()
            assert line == "ready\n", line + worker.stderr.read()
        for worker in workers:
            assert worker.stdin is not None
            worker.stdin.write("go\n")
            worker.stdin.flush()
        spans = []
        for worker in workers:
            out, err = worker.communicate(timeout=120)
            assert worker.returncode == 0, err
            first, last = map(float, out.split())
            spans.append((first, last))
    finally:
        for worker in workers:
            if worker.poll() is None:
                worker.kill()
                worker.wait()
    # The two runs of writes overlapped: each began before the other finished.
    assert max(first for first, _ in spans) < min(last for _, last in spans), spans
    store = NoteStore(root, "alice")
    assert len(store.list()) == 2 * count
    adds = [e for e in store.journal.entries() if e["op"] == "add" and e["ok"]]
    assert len(adds) == 2 * count
    # The index agrees with the files.
    for i in (0, count - 1, 1000, 1000 + count - 1):
        assert len(store.search(f"t{i}x0")) == 1


def test_threads_with_their_own_store_objects_lose_no_note(root: Path) -> None:
    errors: list[BaseException] = []

    def work(offset: int) -> None:
        try:
            store = NoteStore(root, "alice")
            for i in range(offset, offset + 8):
                assert add_distinct(store, i).ok
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(o,)) for o in (0, 100, 200)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert len(NoteStore(root, "alice").list()) == 24


def test_threads_sharing_one_store_lose_no_note(store: NoteStore) -> None:
    threads = [
        threading.Thread(target=lambda o=o: [add_distinct(store, i) for i in range(o, o + 6)])
        for o in (0, 100)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(store.list()) == 12
