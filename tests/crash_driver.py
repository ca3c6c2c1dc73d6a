"""The child process of the crash tests: one write of one kind against a memory root.

    python -m tests.crash_driver <scenario> <memory root>

The parent arms ``TANDEM_FAULT`` so the child dies (SIGKILL) at one point of that write,
then checks what a restart finds. `seed` puts down what each scenario writes over; the
scenario's complete result is what `EXPECTED` describes, so the parent can tell "old",
"new" and anything else apart.
"""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from pathlib import Path

from conductor.cognition.artifacts import write_artifacts
from conductor.layers.turn_format import Part, Turn, TurnMessage
from conductor.layers.user_layers import UserLayers
from conductor.notes import NoteStore
from conductor.search.index import SearchIndex

USER = "ada"
SEEDED_TITLE = "Deploys go out on Fridays after the review"
NEW_TITLE = "The staging database lives on port 5433"
NEW_BODY = "Staging runs Postgres 16 on port 5433; production keeps 5432."
REVISED_BODY = "Deploys go out on Fridays after the review, never after 16:00."
TURN_TEXT = "what port does staging use again"
ARTIFACT = "WORKING_MEMORY.md"
ARTIFACT_TEXT = "# Working memory\n\n## Current Focus\n- the staging port question\n"


def store(root: Path) -> NoteStore:
    return NoteStore(root, USER)


def seeded_id(root: Path) -> str:
    return next(n.id for n in store(root).list(state="all") if n.title == SEEDED_TITLE)


def seed(root: Path) -> None:
    """What every scenario starts from: a note, its usage, a turn, a search source."""
    notes = store(root)
    result = notes.add(title=SEEDED_TITLE, body="Deploys go out on Fridays after the review.",
                       kind="runbook", scope="user", source="inline")
    assert result.ok, result.reason
    notes.record_injection([result.note.id])
    notes.regenerate_index()
    layers = UserLayers(root, USER)
    layers.ensure()
    layers.history.append(lambda seq: turn(seq, "the first question"))
    library = root / "library" / USER
    library.mkdir(parents=True)
    (library / "deploys.md").write_text("# Deploys\n\nFridays after the review.\n")
    embed = root / "layers" / USER / "embed"
    embed.mkdir(parents=True, exist_ok=True)
    (embed / "sources.json").write_text(
        '{"sources": [{"id": "lib", "collection": "library", "type": "markdown_tree", '
        f'"path": "library/{USER}"}}]}}')
    SearchIndex(root, USER, None).sync()
    (library / "staging.md").write_text("# Staging\n\nPostgres on port 5433.\n")


def turn(seq: int, text: str) -> Turn:
    return Turn(seq=seq, time=datetime(2026, 11, 30, 12, 0, tzinfo=UTC), utc_offset_minutes=0,
                messages=(TurnMessage("user", (Part("text", text),)),
                          TurnMessage("assistant", (Part("text", "5433."),))))


def note_add(root: Path) -> None:
    store(root).add(title=NEW_TITLE, body=NEW_BODY, kind="reference", scope="user",
                    source="inline")


def note_update(root: Path) -> None:
    store(root).update(seeded_id(root), body=REVISED_BODY, source="inline")


def note_archive(root: Path) -> None:
    store(root).user_archive(seeded_id(root), via="cli")


def index_md(root: Path) -> None:
    notes = store(root)
    notes.update(seeded_id(root), body=REVISED_BODY, source="inline")
    notes.regenerate_index()


def usage(root: Path) -> None:
    store(root).record_injection([seeded_id(root)])


def history(root: Path) -> None:
    UserLayers(root, USER).history.append(lambda seq: turn(seq, TURN_TEXT))


def artifact(root: Path) -> None:
    write_artifacts(UserLayers(root, USER).files, [ARTIFACT], {ARTIFACT: ARTIFACT_TEXT})


def sync(root: Path) -> None:
    SearchIndex(root, USER, None).sync()


SCENARIOS = {f.__name__: f for f in (note_add, note_update, note_archive, index_md, usage,
                                     history, artifact, sync)}

if __name__ == "__main__":
    SCENARIOS[sys.argv[1]](Path(sys.argv[2]))
