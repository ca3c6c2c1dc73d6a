"""Records share their prefixes (real engine, scripted answers, each test once a chat
template): interleaved sessions keep every record they replay in a ledger bound that
flat copies of their records would overflow several times over."""

from __future__ import annotations

import uuid

from tests.inprocess import InProcessApp

BOUND = 7000  # ids: memory.ledger_max_tokens
SESSIONS, TURNS = 3, 6


def test_interleaved_sessions_replay_every_turn_from_a_ledger_flat_copies_would_overflow(
        template_served, tmp_path, tiny_profile):
    app = InProcessApp(template_served, tmp_path, memory_changes={"ledger_max_tokens": BOUND})
    tag = uuid.uuid4().hex[:6]
    system = {"role": "system", "content": "You review the ops team's change requests."}
    histories = {f"cap-{tag}-{n}": [system] for n in range(SESSIONS)}
    previous: dict[str, dict] = {}
    for turn in range(TURNS):
        for session, history in histories.items():  # interleaved, as agents run
            history.append({"role": "user", "content": f"Change {turn} of {session}: "
                            + "the deploy script moves the cache host and its keys. " * 8})
            content, usage, _ = app.chat(history, f"Reviewed change {turn}. " * 12,
                                         headers={"X-Tandem-Session": session})
            history.append({"role": "assistant", "content": content})
            if session in previous:
                floor = (previous[session]["prompt_tokens"]
                         + previous[session]["completion_tokens"] - tiny_profile.block_size)
                assert usage["prompt_tokens_details"]["cached_tokens"] >= floor, (
                    session, turn, usage)
            previous[session] = usage
    ledger = app.memory._ledger  # its own bound: the ledger itself
    flat = sum(len(r.ids) for r in ledger.user_records("tester"))
    assert ledger.tokens <= BOUND
    assert flat > 2 * BOUND  # held as flat copies, these records would not fit
    assert len(ledger) == SESSIONS * TURNS  # every turn's record is still there
