"""The writer's gate at its boundary: a "no" at least 0.8 sure skips the turn.
A pure unit test of the writer's own decision (the engine's side is in tests/test_writer.py)."""

from __future__ import annotations

import asyncio

import pytest

from conductor.ledger.records import Ledger, Record, VisibleMessage
from conductor.notes import NoteStore
from conductor.writing.writer import GenerationPiece, Writer


class GateOnly:
    """A backend whose gate answers as told and whose turn writes nothing."""

    def __init__(self, answer: str, probability: float) -> None:
        self.answer, self.probability, self.turns = answer, probability, 0

    def turn_ids(self, record, text):
        return [*record.ids, 1]

    async def gate(self, prompt_ids, script):
        return self.answer, self.probability

    async def generate(self, prompt_ids, max_tokens, script, grammar=None):
        self.turns += 1
        yield GenerationPiece("nothing to keep", 3, "stop")

    def client_busy(self):
        return False


@pytest.mark.parametrize(("answer", "probability", "turn_runs"), [
    # The claimed threshold as literals, so another GATE_CONFIDENCE turns this red.
    ("no", 0.8, False),  # sure enough: skipped
    ("no", 0.79, True),  # not sure enough: the turn runs
    ("yes", 0.99, True),
])
def test_the_gate_skips_the_turn_only_on_a_sure_no(tmp_path, answer, probability, turn_runs):
    ledger = Ledger()
    ledger.record(Record(user="u", session="s", ids=(1, 2, 3), ended_cleanly=True,
                         messages=(VisibleMessage.of("user", "hi"),
                                   VisibleMessage.of("assistant", "hello"))))
    backend = GateOnly(answer, probability)
    writer = Writer(ledger.latest, lambda user: NoteStore(tmp_path / "memory", user), backend,
                    tmp_path / "runs", mode="on")
    run = asyncio.run(writer.run("u", "s", "admin"))
    assert (run.outcome == "gated") != turn_runs
    assert backend.turns == int(turn_runs)
