"""Tail notes on the real engine: the card, the index and matching notes go in once, right
after the turn they were chosen for, and every later turn replays them where they were."""

from __future__ import annotations

import pytest

from tests.inprocess import InProcessApp, eventually


def user(text: str) -> list[dict]:
    return [{"role": "user", "content": text}]


# The index, three matches under their header and the full preamble: what every profile
# showed before `tandem bench --index` (the default now shows no index and one plain
# match: test_by_default_the_card_goes_alone_and_one_note_matches_as_a_statement)
LISTED = {"notes_shown": (("index_budget", 1500), ("max_matches", 3),
                          ("note_format", "header"), ("match_frame", "full"))}


@pytest.fixture
def app(served, tmp_path) -> InProcessApp:
    return InProcessApp(served, tmp_path, memory_changes=LISTED)


def add(app: InProcessApp, title: str, body: str, kind: str = "reference", **extra):
    result = app.memory.store("tester").add(title=title, body=body, kind=kind, scope="user",
                                            source="cli", has_user_message=True, **extra)
    assert result.ok, result.reason
    return result.note


def spans(app: InProcessApp, session: str, kind: str):
    record = app.memory.latest_record("tester", session)
    return [s for s in record.spans if s.kind == kind], record


def span_text(app: InProcessApp, record, span) -> str:
    tokenizer = app.app.state.tandem.engine.tokenizer
    return tokenizer.decode(list(record.ids[span.start:span.end]))


def test_the_shared_context_goes_in_on_turn_one_and_sits_at_the_same_offset_in_turn_two(app):
    session = {"X-Tandem-Session": "card-offset"}
    content, _, _ = app.chat(user("hello there"), "Hi.", headers=session)
    (card,), first = spans(app, "card-offset", "shared")
    # No system prompt, no client tools: the engine's memory tools' catalog opens the
    # prompt, and the shared context comes right after it.
    tokenizer = app.app.state.tandem.engine.tokenizer
    head = tokenizer.decode(list(first.ids[: card.start]))
    assert head.startswith("<|im_start|>system\n# Tools") and '"memory_search"' in head
    assert head.endswith("</tool_call><|im_end|>\n") and "<|im_start|>user" not in head
    history = [*user("hello there"), {"role": "assistant", "content": content},
               *user("and now?")]
    app.chat(history, "Now this.", headers=session)
    cards, second = spans(app, "card-offset", "shared")
    assert cards == [card]
    assert second.ids[card.start:card.end] == first.ids[card.start:card.end]
    assert second.ids[: len(first.ids)] == first.ids


def test_the_index_lists_pinned_rules_first_then_ratified_then_recent(app):
    store = app.memory.store("tester")
    old = add(app, "staging hostname", "staging runs on alpha.internal")
    ratified = add(app, "ratified gotcha", "flaky test on mondays", kind="gotcha")
    store.ratify(ratified.id, via="cli")
    rule = add(app, "always answer in english", "the user asked for english", kind="rule")
    store.ratify(rule.id, via="cli")
    store.pin(rule.id, via="cli")
    new = add(app, "cache directory", "the cache lives in /var/cache/app")
    app.chat(user("hi"), "Hello.", headers={"X-Tandem-Session": "index"})
    (index,), record = spans(app, "index", "shared")
    assert index.note_ids == (rule.id, ratified.id, new.id, old.id)
    text = span_text(app, record, index)
    assert text.index("always answer in english") < text.index("ratified gotcha")
    assert "never mention" in text


def test_matching_notes_need_two_shared_words_and_stop_at_three(app):
    facts = [("pnpm workspace root", "packages live under apps and libs folders"),
             ("pnpm workspace filters", "run one package with the filter flag and its name"),
             ("pnpm workspace protocol", "local dependencies are linked by version star"),
             ("pnpm workspace catalogs", "shared versions sit in one catalog section"),
             ("pnpm workspace hoisting", "nothing is hoisted except eslint plugins")]
    for title, body in facts:
        add(app, title, body)
    add(app, "unrelated pnpm", "only one word in common with the question")
    app.chat(user("How is the pnpm workspace set up?"), "Like this.",
             headers={"X-Tandem-Session": "match"})
    (notes,), record = spans(app, "match", "notes")
    assert len(notes.note_ids) == 3
    titles = span_text(app, record, notes)
    assert "unrelated pnpm" not in titles and "say the answer comes from your notes" in titles


def test_by_default_the_card_goes_alone_and_one_note_matches_as_a_statement(served,
                                                                             tmp_path):
    """The default memory.notes_shown (no index, one plain match):
    the card alone in the shared context, the matching note as `title: body` before the
    question."""
    lean = InProcessApp(served, tmp_path)  # the default: no index, one plain note
    listed = add(lean, "staging hostname", "staging runs on alpha.internal")
    add(lean, "cache directory", "the cache lives in /var/cache/app")
    lean.chat(user("Where does staging run, which hostname?"), "There.",
              headers={"X-Tandem-Session": "lean"})
    (shared,), record = spans(lean, "lean", "shared")
    assert shared.note_ids == ()
    card = span_text(lean, record, shared)
    assert "<tandem_memory" in card and "cache directory" not in card
    (notes,), _ = spans(lean, "lean", "notes")
    assert notes.note_ids == (listed.id,)
    text = span_text(lean, record, notes)
    assert "staging hostname: staging runs on alpha.internal" in text
    assert listed.id not in text and "say the answer comes from your notes" in text


def test_a_matching_note_goes_right_before_the_message_it_matches(served, tmp_path):
    """Issue 58: the note sits between what the prompt held (here the card) and the user
    message, under a preamble about the next message; `match_place: after` keeps it after
    the question, as before."""
    for place in ("before", "after"):
        app = InProcessApp(served, tmp_path / place, memory_changes={
            "notes_shown": (("match_place", place),)})
        add(app, "staging hostname", "staging runs on alpha.internal")
        app.chat(user("Where does staging run, which hostname?"), "There.",
                 headers={"X-Tandem-Session": place})
        (notes,), record = spans(app, place, "notes")
        tokenizer = app.app.state.tandem.engine.tokenizer
        before = tokenizer.decode(list(record.ids[:notes.start]))
        after = tokenizer.decode(list(record.ids[notes.end:]))
        if place == "before":
            assert after.startswith("<|im_start|>user\nWhere does staging run"), after
            assert "bear on the user's next message" in span_text(app, record, notes)
        else:
            assert before.rstrip().endswith("which hostname?<|im_end|>"), before
            assert "bear on this message" in span_text(app, record, notes)


def test_a_new_session_reads_a_note_another_session_matched_from_the_cache(served, tmp_path,
                                                                           tiny_profile):
    """Before the message, a matched note follows the head and the card, which every new
    session of the user shares: the second session to match it finds it cached. After the
    message it followed that session's own words, and was prefilled every time."""
    app = InProcessApp(served, tmp_path)
    add(app, "staging hostname", "staging runs on alpha.internal")
    system = {"role": "system", "content": "You answer questions about our servers."}
    for n, question in enumerate(("Where does staging run, which hostname?",
                                  "Which hostname is staging on these days?")):
        _, usage, _ = app.chat([system, *user(question)], "There.",
                               headers={"X-Tandem-Session": f"second-{n}"})
    (notes,), _ = spans(app, "second-1", "notes")
    cached = usage["prompt_tokens_details"]["cached_tokens"]
    assert cached >= notes.end - tiny_profile.block_size, (cached, notes)


def test_a_users_question_finds_the_note_its_one_topic_word_names(served, tmp_path):
    """Issue 60: "What is my dog's name?" against the notes the quality bench writes: the
    question shares one stem with the note ("dog's" is "dog"), which names it (its title),
    and the note is the best hit for a question about the user's own things, so it goes in
    after the question; "a birthday party" (no first person) and "a good name for a boat"
    ("name" says what kind of question it is) bring none."""
    lean = InProcessApp(served, tmp_path)  # the default: one plain match
    dog = add(lean, "user's dog", "The user has a dog called Biscuit, a beagle.")
    add(lean, "user's birthday", "The user's birthday is on 14 March.")
    add(lean, "laptop name", "The user's laptop is named otter.")
    lean.chat(user("What is my dog's name?"), "Biscuit.", headers={"X-Tandem-Session": "dog"})
    (notes,), record = spans(lean, "dog", "notes")
    assert notes.note_ids == (dog.id,)
    assert "The user has a dog called Biscuit" in span_text(lean, record, notes)
    for n, message in enumerate(["Give me three ideas for a birthday party.",
                                 "What's a good name for a boat?"]):
        lean.chat(user(message), "Sure.", headers={"X-Tandem-Session": f"none-{n}"})
        assert spans(lean, f"none-{n}", "notes")[0] == [], message


def test_a_note_goes_in_once_per_session_and_never_on_a_tool_turn(app):
    add(app, "deploy runbook", "deploy with make deploy from the release branch", kind="runbook")
    session = {"X-Tandem-Session": "once"}
    question = "How do we deploy the release branch?"
    content, _, _ = app.chat(user(question), "Let me check.", headers=session)
    assert len(spans(app, "once", "notes")[0]) == 1
    history = [*user(question), {"role": "assistant", "content": content}, *user(question)]
    content2, _, _ = app.chat(history, "As before.", headers=session)
    assert len(spans(app, "once", "notes")[0]) == 1  # the first one, replayed; none added
    tool_turn = [*history, {"role": "assistant", "content": content2, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "deploy", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "deploy the release branch now"}]
    app.chat(tool_turn, "Done.", headers=session)
    assert len(spans(app, "once", "notes")[0]) == 1


def test_a_stale_program_state_is_never_injected(app):
    add(app, "nightly build version", "the nightly build server runs version 3",
        kind="program_state", verify_by="2020-01-01")
    add(app, "release checklist", "tag the commit, push it, announce it")
    app.chat(user("Which version does the nightly build server run?"), "Checking.",
             headers={"X-Tandem-Session": "stale"})
    (index,), record = spans(app, "stale", "shared")
    notes = spans(app, "stale", "notes")[0]
    injected = set(index.note_ids) | {i for s in notes for i in s.note_ids}
    stale = [n.id for n in app.memory.store("tester").list() if n.kind == "program_state"]
    assert stale and not set(stale) & injected
    assert "nightly build version" not in span_text(app, record, index)


def test_a_compaction_brings_the_card_and_the_index_back_after_the_system_prompt(app):
    note = add(app, "coding style", "four spaces, no tabs")
    session = {"X-Tandem-Session": "compaction"}
    app.chat(user("first question"), "First answer.", headers=session)
    summarised = [{"role": "system", "content": "Summary: we talked about a first question."},
                  *user("second question")]
    app.chat(summarised, "Second answer.", headers=session)
    (shared,), record = spans(app, "compaction", "shared")
    text = span_text(app, record, shared)
    assert shared.note_ids == (note.id,) and "<tandem_memory" in text
    before = app.app.state.tandem.engine.tokenizer.decode(list(record.ids[:shared.start]))
    # after the system prompt and the tool catalog (the engine's memory tools) it carries
    assert before.startswith("<|im_start|>system\nSummary: we talked about a first question.")
    assert before.endswith("</tool_call><|im_end|>\n") and "<|im_start|>user" not in before
    assert spans(app, "compaction", "session")[0] == []  # no client tools, no notes of its own


def test_memory_off_by_header_injects_nothing(app):
    add(app, "deploy runbook", "deploy with make deploy from the release branch")
    app.chat(user("How do we deploy the release branch?"), "Hm.",
             headers={"X-Tandem-Session": "off", "X-Tandem-Memory": "off"})
    record = app.memory.latest_record("tester", "off")
    assert record.spans == ()


def test_injections_are_counted_in_usage(app):
    note = add(app, "deploy runbook", "deploy with make deploy from the release branch")
    app.chat(user("How do we deploy the release branch?"), "Like so.",
             headers={"X-Tandem-Session": "usage"})
    eventually(lambda: app.memory.store("tester").usage(note.id)["total"] == 1)


BLOCK = ('<tandem_memory op="add" scope="session" kind="gotcha">\ntitle: turn {n} fact\n\n'
         "Fact number {n} about the deploy pipeline.\n</tandem_memory>")


@pytest.mark.parametrize("memory_mode", ["on", "off"])
def test_six_turns_with_fifty_notes_keep_every_prefix_cached(served, tmp_path, memory_mode,
                                                            tiny_profile):
    """The measurement that matters: each turn's cached tokens are at least the previous
    turn's prompt plus output less one block, with memory on as with memory off."""
    app = InProcessApp(served, tmp_path, memory_mode=memory_mode)
    store = app.memory.store("tester")
    for n in range(50):
        store.add(title=f"pipeline note {n}", body=f"stage {n} of the deploy pipeline runs "
                  f"step {n}", kind="reference", scope="user", source="cli")
    session = {"X-Tandem-Session": f"six-{memory_mode}"}
    history: list[dict] = []
    previous = None
    for turn in range(6):
        history.append({"role": "user", "content": f"What does stage {turn} of the deploy "
                                                   f"pipeline run?"})
        script = f"Stage {turn} runs step {turn}. " + BLOCK.replace("{n}", str(turn))
        content, usage, _ = app.chat(history, script, headers=session)
        if previous is not None:
            floor = (previous["prompt_tokens"] + previous["completion_tokens"]
                     - tiny_profile.block_size)
            assert usage["prompt_tokens_details"]["cached_tokens"] >= floor, (turn, usage)
        previous = usage
        history.append({"role": "assistant", "content": content})
    if memory_mode == "on":
        kinds = {s.kind for s in app.memory.latest_record("tester", f"six-{memory_mode}").spans}
        assert {"shared", "notes", "block"} <= kinds
