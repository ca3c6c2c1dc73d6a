"""The prewarm's heads seeded at start from the saved ledger records
(`PrewarmHeads.seed`, `Ledger.newest`): each head in its own record's group (its user's,
never another's), the newest kept within the bounds, records without the group's flags
(saved before they were kept, memory off) or without a shared context skipped, heads
seen live left as they are, and a user's delete forgets seeded heads too."""

from __future__ import annotations

from conductor.hidden.prewarm import SEED_SESSIONS, ContextGroup, PrewarmHeads
from conductor.ledger.files import decode_record, encode_record
from conductor.ledger.records import Ledger, Record, Span, VisibleMessage


def record(user: str, session: str, head: tuple[int, ...], project: str | None = None,
           flags: tuple[bool, bool] | None = (True, True), shared: bool = True) -> Record:
    """A first turn: head, a shared context of 3 ids, the message and answer."""
    ids = [*head, 7, 7, 7, 8, 9]
    spans = (Span(len(head), len(head) + 3, "shared"),) if shared else ()
    return Record(user=user, session=session, messages=(VisibleMessage("user", session),),
                  ids=ids, ended_cleanly=True, spans=spans, project=project,
                  shared_flags=flags)


def ledger_of(*records: Record) -> Ledger:
    """A ledger holding `records`, the last the most recently used (as loaded at start)."""
    ledger = Ledger()
    for r in records:
        ledger.record(r)
    return ledger


def test_seeded_heads_keep_their_record_s_user_project_and_flags_and_are_due_at_once():
    ledger = ledger_of(record("ann", "a1", (1, 2)), record("bob", "b1", (3, 4), "web"),
                       record("ann", "a2", (5,), flags=(False, True)),
                       record("ann", "a3", (6,), flags=None),  # saved before flags
                       record("ann", "a4", (7,), shared=False),  # no shared context
                       record("ann", "a5", (8,), flags=(True, False)))  # reads no longer
    heads = PrewarmHeads()
    assert heads.seed(ledger.newest(SEED_SESSIONS), reads=True) == 3
    ann = ContextGroup("ann", None, card=True, reads=True)
    bob = ContextGroup("bob", "web", card=True, reads=True)
    ann_read = ContextGroup("ann", None, card=False, reads=True)
    assert heads.groups() == [ann_read, bob, ann]  # the newest record's group first
    assert [s.head_ids for s in heads.stale(bob, "v1")] == [(3, 4)]  # bob's head, bob's
    assert [s.head_ids for s in heads.stale(ann, "v1")] == [(1, 2)]
    heads.forget_user("ann")
    assert heads.groups() == [bob]


def test_seeding_keeps_the_newest_heads_within_the_bounds_and_leaves_live_heads_alone():
    ann = ContextGroup("ann", None, card=True, reads=True)
    heads = PrewarmHeads(heads_per_group=2, max_groups=2)
    heads.seen(ann, (9,), version="v1")  # seen live before the seed (an engine restart)
    ledger = ledger_of(record("cat", "c1", (30,)), record("bob", "b1", (20,)),
                       record("ann", "a1", (1,)), record("ann", "a2", (2,)),
                       record("ann", "a3", (9,)))
    assert heads.seed(ledger.newest(SEED_SESSIONS), reads=True) == 2
    assert heads.groups() == [ann, ContextGroup("bob", None, True, True)]  # cat: no room
    # the live head keeps its version; a3's head is it; a2's fills the room, a1's has none
    assert [s.head_ids for s in heads.stale(ann, "v1")] == [(2,)]
    assert [s.head_ids for s in heads.stale(ann, "v2")] == [(9,), (2,)]  # live first


def test_flags_survive_the_file_and_an_old_file_without_them_reads_as_none():
    saved = encode_record(record("ann", "a1", (1, 2), flags=(False, True)))
    assert decode_record("ann", "a1", saved).shared_flags == (False, True)
    del saved["shared_flags"]
    assert decode_record("ann", "a1", saved).shared_flags is None


def test_the_seed_reads_a_bounded_newest_part_of_a_large_ledger():
    """100,000 sessions in 900 groups: the seed reads the newest SEED_SESSIONS only (its
    time, about 5 ms here, is measured outside the tests: a timed test is a flaky one)."""
    ledger = Ledger(max_tokens=10_000_000)
    for n in range(100_000):
        ledger.record(record(f"u{n % 900}", f"s{n}", tuple(range(n % 7, 60))))
    newest = ledger.newest(SEED_SESSIONS)
    assert len(newest) == SEED_SESSIONS and newest[0].session == "s99999"
    heads = PrewarmHeads()
    heads.seed(newest, reads=True)
    assert len(heads.groups()) == heads.max_groups
