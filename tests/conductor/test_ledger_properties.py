"""Property tests of the session ledger (`conductor/ledger/records.py`), for the "Hostile
input" part of the reliability issue: for arbitrary sequences of record and find over a few
users and sessions, with arbitrary messages, tool arguments and id arrays, nothing raises;
`find` returns only a record of the asking user and session, whose visible messages are
exactly the longest held proper prefix of the query; the documented bounds (records a
session, ids held) hold after every operation; a record's hidden spans stay inside its ids.
Users and sessions include pairs whose hash seeds coincide ("u\\0" + "s" and "u" + "\\0s"
both seed "u\\0\\0s"): the (user, session) lookup, not the hash, must keep them apart.
`RELIABILITY.md` quotes the example counts (`--hypothesis-show-statistics`)."""

from __future__ import annotations

import json
from dataclasses import replace

from hypothesis import event, example, given, settings
from hypothesis import strategies as st
from text_strategies import WITH_SURROGATE

from conductor.ledger.id_blocks import BLOCK_SIZE, BlockIds
from conductor.ledger.records import (
    MAX_TOKENS,
    RECORDS_PER_SESSION,
    Ledger,
    Record,
    Span,
    VisibleMessage,
    canonical_arguments,
)

USERS = st.sampled_from(["u", "v", "u\0", ""])
SESSIONS = st.sampled_from(["s", "\0s", "t", ""])
ROLES = st.sampled_from(["system", "user", "assistant", "tool", "tools"])
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner,
                                                                max_size=3),
    max_leaves=8)
ARGUMENTS = st.one_of(JSON, JSON.map(json.dumps), st.text(max_size=20))
# A small vocabulary (with texts that normalise alike) so that queries often extend records;
# arbitrary text besides.
CONTENT = st.one_of(st.none(), st.sampled_from(["a", " a", "a\n", "b", "", "› remembered: x"]),
                    st.text(max_size=30))
MESSAGE = st.builds(
    VisibleMessage.of, ROLES, CONTENT,
    st.one_of(st.none(), st.lists(st.tuples(st.sampled_from(["f", "g"]), ARGUMENTS),
                                  max_size=2)))
MESSAGES = st.lists(MESSAGE, min_size=1, max_size=6)
TOKEN_ID = st.integers(min_value=0, max_value=2**31 - 1)  # what array("i") holds


@st.composite
def records(draw) -> Record:
    ids = draw(st.lists(TOKEN_ID, max_size=40))
    at = st.integers(min_value=0, max_value=len(ids))
    spans = []
    for _ in range(draw(st.integers(min_value=0, max_value=3))):
        start, end = sorted((draw(at), draw(at)))
        kind = draw(st.sampled_from(["block", "note", "card", "tool"]))
        spans.append(Span(start, end, kind, tuple(draw(st.lists(st.text(max_size=4),
                                                                 max_size=2)))))
    return Record(user=draw(USERS), session=draw(SESSIONS), messages=tuple(draw(MESSAGES)),
                  ids=ids, ended_cleanly=draw(st.booleans()),
                  spans=tuple(sorted(spans, key=lambda s: s.start)))


# record: a new conversation, or one that grows an earlier record's (same user and session,
# more messages: the next turn). find: a query built on an earlier record's messages (cut
# short or extended), asked by that record's own user and session or by any, or arbitrary.
RECORD = st.tuples(st.just("record"), records(),
                   st.none() | st.tuples(st.integers(min_value=0), st.lists(MESSAGE,
                                                                            max_size=3)))
FIND = st.tuples(st.just("find"), USERS, SESSIONS, st.integers(min_value=0),
                 st.integers(min_value=0, max_value=7), st.lists(MESSAGE, max_size=3),
                 st.sampled_from(["own", "own", "own", "any", "arbitrary"]))
OPERATIONS = st.lists(st.one_of(RECORD, FIND), max_size=30)


def grown(record: Record, grow, recorded: list[Record]) -> Record:
    if grow is None or not recorded:
        return record
    earlier = recorded[grow[0] % len(recorded)]
    return replace(record, user=earlier.user, session=earlier.session,
                   messages=(*earlier.messages, *grow[1]))


def held(ledger: Ledger) -> dict[tuple[str, str], list[Record]]:
    return {owner: list(records.values()) for owner, records in ledger._sessions.items()}


def assert_bounds(ledger: Ledger, written: dict, last_owner) -> None:
    """The bounds the ledger documents, after any operation."""
    sessions = held(ledger)
    all_records = [r for rs in sessions.values() for r in rs]
    # each shared block once, each record's tail of its own
    blocks = {key for r in all_records for key in r.ids.keys}
    assert ledger.tokens == len(blocks) * BLOCK_SIZE + sum(len(r.ids.tail) for r in all_records)
    assert len(ledger) == len(all_records)
    for (user, session), rs in sessions.items():
        assert 1 <= len(rs) <= ledger.per_session
        for r in rs:
            assert (r.user, r.session) == (user, session)  # filed under its own owner
            assert isinstance(r.ids, BlockIds) and r.ids.tail.itemsize == 4
            # the latest version recorded under this owner and these messages, ids as given
            ids, spans = written[(user, session, r.messages)]
            assert tuple(r.ids) == ids and r.spans == spans
            assert all(0 <= s.start <= s.end <= len(r.ids) for s in r.spans)
    # Over the ids bound only when the session just written is alone with one record.
    assert ledger.tokens <= ledger.max_tokens or (
        list(sessions) == [last_owner] and len(sessions[last_owner]) == 1)


def shared_run(messages: tuple, query: list) -> int:
    """The model of a partial match: the leading messages a record shares with the query,
    short of the record's last and the query's last, backed off past tool results."""
    n = 0
    while n < min(len(messages) - 1, len(query) - 1) and messages[n] == query[n]:
        n += 1
    while n and messages[n - 1].role == "tool":
        n -= 1
    return n


def assert_found_by_rule(ledger: Ledger, user: str, session: str, query: list,
                         written: dict) -> None:
    match = ledger.find(user, session, query)
    mine = {r.messages for r in held(ledger).get((user, session), [])}
    proper = [tuple(query[:n]) for n in range(1, len(query))]
    whole = max((n for n in range(1, len(query)) if tuple(query[:n]) in mine), default=0)
    partial = max((shared_run(m, query) for m in mine), default=0)
    if match is None:
        event("find: no record" + (" (one held under another owner)" if any(
            r.messages in proper for rs in held(ledger).values() for r in rs) else ""))
        assert whole == 0 and partial == 0
        return
    record, n = match.record, match.matched_messages
    assert (record.user, record.session) == (user, session)  # never another's
    assert 1 <= n < len(query)  # the last message is the new one, never shared
    assert record.messages[:n] == tuple(query[:n])  # the query's first n messages
    assert n == max(whole, partial)  # the longest run any record shares
    if match.partial:  # it goes on with other messages: a whole record would be preferred
        event("find: a partial match")
        assert partial > whole and len(record.messages) > n
    else:
        event("find: matched" + (" the longest of several held prefixes" if sum(
            prefix in mine for prefix in proper) > 1 else ""))
        assert record.messages == tuple(query[:n]) and n == whole
    ids, spans = written[(user, session, record.messages)]
    assert tuple(record.ids) == ids and record.spans == spans


@settings(max_examples=400, deadline=None)
@given(max_tokens=st.integers(min_value=0, max_value=150),
       per_session=st.integers(min_value=1, max_value=5), operations=OPERATIONS)
def test_any_sequence_of_records_and_finds_keeps_every_session_to_itself_and_in_bounds(
        max_tokens, per_session, operations):
    ledger = Ledger(max_tokens=max_tokens, per_session=per_session)
    written: dict = {}  # (user, session, messages) -> (ids, spans) last recorded
    recorded: list[Record] = []
    last_owner = None
    for operation in operations:
        if operation[0] == "record":
            record = grown(operation[1], operation[2], recorded)
            ids = list(record.ids)
            ledger.record(Record(record.user, record.session, record.messages, ids,
                                 record.ended_cleanly, record.spans))
            ids.clear()  # the caller's list is not the ledger's
            written[(record.user, record.session, record.messages)] = (
                tuple(record.ids), record.spans)
            recorded.append(record)
            if len(ledger) < len({(r.user, r.session, r.messages) for r in recorded}):
                event("record: older records dropped by a bound")
            last_owner = (record.user, record.session)
            latest = ledger.latest(record.user, record.session)
            assert latest is not None and latest.messages == record.messages  # kept
        else:
            _, user, session, pick, cut, extra, mode = operation
            if recorded and mode != "arbitrary":
                base = recorded[pick % len(recorded)]
                query = [*base.messages[:cut or len(base.messages)], *extra]
                if mode == "own":
                    user, session = base.user, base.session
            else:
                query = list(extra)
            assert_found_by_rule(ledger, user, session, query, written)
        if last_owner is not None:
            assert_bounds(ledger, written, last_owner)


@settings(max_examples=300, deadline=None)
@given(operations=OPERATIONS)
def test_with_the_default_bounds_a_query_extending_a_record_of_its_own_session_finds_it(
        operations):
    ledger = Ledger()
    assert (ledger.max_tokens, ledger.per_session) == (MAX_TOKENS, RECORDS_PER_SESSION)
    written: dict = {}
    recorded: list[Record] = []
    for operation in operations:
        if operation[0] != "record":
            continue
        record = grown(operation[1], operation[2], recorded)
        recorded.append(record)
        ledger.record(record)
        written[(record.user, record.session, record.messages)] = (tuple(record.ids),
                                                                   record.spans)
        query = [*record.messages, VisibleMessage.of("user", "next")]
        match = ledger.find(record.user, record.session, query)
        assert match is not None and match.matched_messages == len(record.messages)
        assert_found_by_rule(ledger, record.user, record.session, query, written)
        for user, session in [("u", "s"), ("u\0", "s"), ("u", "\0s"), ("v", "t")]:
            if (user, session) != (record.user, record.session):
                assert_found_by_rule(ledger, user, session, query, written)
        assert_bounds(ledger, written, (record.user, record.session))


@settings(max_examples=500, deadline=None)
@given(role=ROLES, content=CONTENT,
       calls=st.lists(st.tuples(st.text(max_size=8), ARGUMENTS), max_size=3))
@example(role="assistant", content=None, calls=[("f", "1" * 5000)])  # int too long to parse
@example(role="assistant", content="", calls=[("f", "NaN")])
@example(role="assistant", content="", calls=[("f", '{"a": 1e999}')])
def test_any_message_becomes_a_visible_message_with_a_digest_and_finds_nothing_when_empty(
        role, content, calls):
    message = VisibleMessage.of(role, content, calls)
    assert message.content == (content or "").strip()
    assert len(message.digest()) == 16
    # alike arguments, as a JSON string or as an object, give the same canonical text
    for _, arguments in calls:
        canonical = canonical_arguments(arguments)
        assert canonical_arguments(canonical) == canonical or isinstance(arguments, str)
    ledger = Ledger()
    assert ledger.find("u", "s", []) is None
    assert ledger.find("u", "s", [message]) is None




@settings(max_examples=100, deadline=None)
@given(content=WITH_SURROGATE)
@example(content="hi \ud800")
def test_a_message_with_a_lone_surrogate_is_looked_up_without_raising(content):
    query = [VisibleMessage.of("user", content), VisibleMessage.of("user", "next")]
    assert Ledger().find("u", "s", query) is None


@settings(max_examples=20, deadline=None)
@given(depth=st.integers(min_value=20_000, max_value=100_000),
       opener=st.sampled_from(["[", '{"a":']))
@example(depth=20_000, opener="[")
def test_tool_arguments_nested_past_the_parsers_depth_do_not_raise(depth, opener):
    try:
        VisibleMessage.of("assistant", "", [("f", opener * depth)])
    except RecursionError:
        raise AssertionError("RecursionError escaped VisibleMessage.of") from None


def test_a_record_whose_hidden_span_runs_past_its_ids_is_refused_where_it_enters():
    """The ledger states its invariant at the change (nano-vllm's habit): a span past the
    ids would make a later replay cut in the wrong place, so it never gets in."""
    import pytest

    ledger = Ledger()
    bad = Record("u", "s", (VisibleMessage.of("user", "hi"),), [1, 2, 3], True,
                 spans=(Span(2, 5, "notes"),))
    with pytest.raises(AssertionError, match="past the record's 3 ids"):
        ledger.record(bad)
    assert ledger.latest("u", "s") is None
