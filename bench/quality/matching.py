"""`python -m bench.quality.matching`: does the answering note reach the prompt? (issue 60)

The quality bench's memory-on lanes answer only as well as the matched notes let them: the
model sees a note only when `build_matches` (conductor/hidden/tail_notes.py) puts it after
the question. This replays that rule without an engine, on the stores the bench builds:

* `on`: every fact's notes written through the store, as `QualityBench.write_notes` does,
  before any question;
* `told`: each fact said as the `told` lane says it ("Remember that <note>", "Update: <new
  text>"), recognised and carried out as the server does, just before its own question
  (so question n sees the notes of facts 0..n only, as in the bench).

For each question: whether the answering note is among the matches (for an item of
several notes, `any` and `all` of them), and how many notes were shown; `precision` is the
share of shown notes that answer their question. The other side of precision: the messages
the commands bench labels as no command (dev, test, holdout: coding questions, chat,
reminders, quotes) asked of the `on` store, and how many of them a note is shown for (some
rightly: "did I ever tell you about my cat?"). Token counts are estimated (four
characters a token): the match budget (600) is far above one or two notes here.

Prints one line a lane, or `--each` a line a question; `--json FILE` writes every row.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path
from typing import Any

from bench.quality.facts import FACTS, Fact, Note, load_facts, write_facts
from bench.quality.run import USER, _lower_first
from conductor.hidden.tail_notes import DEFAULT_SHOWN, NotesShown, build_matches
from conductor.notes import NoteStore
from conductor.writing.command_writes import carry_out
from conductor.writing.commands import recognise


def estimate_tokens(text: str) -> int:
    return max(1, len(text) // 4)


def told_messages(fact: Fact) -> list[str]:
    """What the `told` lane says for a fact (bench/quality/run.py: `QualityBench.tell`)."""
    said = [f"Remember that {_lower_first(note.body)}" for note in
            [Note(fact.kind, fact.scope, fact.title, fact.body), *fact.more]]
    if fact.revised:
        said.append(f"Update: {_lower_first(fact.revised)}")
    return said


def _on_answering_ids(store: NoteStore, facts: list[Fact]) -> list[set[str]]:
    by_title: dict[str, str] = {n.title: n.id for n in store.list()}
    return [{by_title[note.title] for note in fact.notes()} for fact in facts]


def _row(lane: str, n: int, fact: Fact, store: NoteStore, answering: set[str],
         shown: NotesShown) -> dict[str, Any]:
    found = build_matches(store, fact.question, store.list(), set(), estimate_tokens, shown)
    ids = set(found.note_ids) if found else set()
    return {"lane": lane, "item": n, "kind": fact.item_kind, "question": fact.question,
            "any": bool(ids & answering), "all": answering <= ids,
            "shown": len(ids), "right_shown": len(ids & answering),
            "titles": [store.get(i).title for i in sorted(ids)]}


def replay(facts: list[Fact], shown: NotesShown = DEFAULT_SHOWN) -> list[dict[str, Any]]:
    """A row a question and lane: was the answering note matched."""
    rows = []
    with tempfile.TemporaryDirectory(prefix="tandem-matching-") as root:
        on = NoteStore(Path(root) / "on", USER)
        write_facts(on, facts)
        answering = _on_answering_ids(on, facts)
        rows += [_row("on", n, fact, on, answering[n], shown) for n, fact in enumerate(facts)]
        told = NoteStore(Path(root) / "told", USER)
        for n, fact in enumerate(facts):
            ids: set[str] = set()
            for k, message in enumerate(told_messages(fact)):
                command = recognise(message)
                if command is None:
                    continue
                outcome = carry_out(told, command, session=f"t-{n}-{k}", project=None)
                ids |= set(outcome.note_ids)
            rows.append(_row("told", n, fact, told, ids, shown))
    return rows


LOOK_ALIKE_SETS = ("messages-dev.tsv", "messages-test.tsv", "messages-holdout.tsv")


def other_messages(facts: list[Fact], shown: NotesShown = DEFAULT_SHOWN) -> tuple[int, int]:
    """How many of the commands bench's `none` messages are shown a note of the `on`
    store, of how many."""
    from bench.commands.run import rows as labelled

    messages = [r["text"] for name in LOOK_ALIKE_SETS for r in labelled(name)
                if r["label"] == "none"]
    with tempfile.TemporaryDirectory(prefix="tandem-matching-") as root:
        store = NoteStore(Path(root), USER)
        write_facts(store, facts)
        notes = store.list()
        matched = sum(build_matches(store, m, notes, set(), estimate_tokens, shown) is not None
                      for m in messages)
    return matched, len(messages)


def summary(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    out = {}
    for lane in dict.fromkeys(r["lane"] for r in rows):
        mine = [r for r in rows if r["lane"] == lane]
        shown = sum(r["shown"] for r in mine)
        kinds = dict.fromkeys(r["kind"] for r in mine)
        out[lane] = {
            "questions": len(mine), "any": sum(r["any"] for r in mine),
            "all": sum(r["all"] for r in mine), "shown": shown,
            "precision": round(sum(r["right_shown"] for r in mine) / shown, 3) if shown else None,
            "by_kind": {k: f"{sum(r['any'] for r in mine if r['kind'] == k)}/"
                           f"{sum(r['kind'] == k for r in mine)}" for k in kinds},
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.quality.matching",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--facts", type=Path, default=FACTS)
    parser.add_argument("--max-matches", type=int, default=DEFAULT_SHOWN.max_matches)
    parser.add_argument("--each", action="store_true", help="a line a question")
    parser.add_argument("--json", type=Path, help="write every row here")
    args = parser.parse_args()
    shown = NotesShown(max_matches=args.max_matches)
    facts = load_facts(args.facts)
    rows = replay(facts, shown)
    if args.each:
        for r in rows:
            mark = "ok" if r["any"] else "--"
            print(f"{r['lane']:5} {r['item']:2} {mark} {r['shown']} {r['question']} "
                  f"-> {r['titles']}")
    for lane, s in summary(rows).items():
        print(f"{lane}: answering note in the prompt {s['any']}/{s['questions']} (all of an "
              f"item's notes: {s['all']}), notes shown {s['shown']}, of them answering "
              f"{s['precision']}; by kind {s['by_kind']}")
    matched, asked = other_messages(facts, shown)
    print(f"messages that are no command (the commands bench's none): a note shown for "
          f"{matched}/{asked}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
