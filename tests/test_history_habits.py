"""Hidden context survives every way a client sends its history back (real engine,
scripted answers): each later turn starts with the exact ids the engine holds, so it is
served from the prefix cache, and the card, the notes and the blocks stay in the prompt.

Every test runs once a chat template (`template_served`: the embedded one, Qwen3's and
Qwen2.5's as published), each through the real app over HTTP on the session's engine."""

from __future__ import annotations

import json
import uuid

import httpx
import openai
import pytest

from tests.inprocess import InProcessApp, eventually

BLOCK = ('<tandem_memory op="add" scope="user" kind="reference">\ntitle: {title}\n\n'
         "{title} is a fact worth keeping.\n</tandem_memory>")
TOOLS = [{"type": "function", "function": {
    "name": "read_file", "description": "Read a file",
    "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}}]


@pytest.fixture
def sdk(template_served) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{template_served.base_url}/v1", api_key="unused",
                         max_retries=0)


@pytest.fixture(params=[False, True], ids=["plain", "streamed"])
def stream(request) -> bool:
    return request.param


@pytest.fixture
def memory(template_served):
    return template_served.app.state.tandem.memory


@pytest.fixture
def talk(sdk, memory, template_served, tiny_profile, stream):
    """A new conversation through the OpenAI SDK, streamed or not, memory on."""
    def start(**body) -> Conversation:
        return Conversation(sdk, memory, template_served.app.state.tandem.engine.tokenizer,
                            tiny_profile.block_size, stream, **body)
    return start


class Conversation:
    """One client's conversation: sends turns, checks the cache floor, reads the record."""

    def __init__(self, sdk: openai.OpenAI, memory, tokenizer, block_size: int, stream: bool,
                 **body) -> None:
        self.sdk, self.memory, self.tokenizer = sdk, memory, tokenizer
        self.block_size, self.stream, self.body = block_size, stream, body
        self.user = memory.settings.user_name
        self.session = f"habit-{uuid.uuid4().hex[:8]}"
        self.previous: dict | None = None

    def send(self, messages: list[dict], script: str, extends: bool = True,
             project: str | None = None, **extra) -> tuple[dict, dict]:
        """(the answer as a message to send back, usage); `extends`: the cache floor;
        `project`: sent as X-Tandem-Project."""
        body = {**self.body, **extra}
        kwargs = {k: body.pop(k) for k in ("tools", "stop") if k in body}
        headers = {"X-Tandem-Session": self.session}
        if project is not None:
            headers["X-Tandem-Project"] = project
        call = dict(model="tiny", messages=messages, extra_body={"script": script, **body},
                    extra_headers=headers, **kwargs)
        before = self.memory.records(self.user, self.session)
        message, usage = (self._streamed(call) if self.stream else self._plain(call))
        if extends and self.previous is not None:
            floor = (self.previous["prompt_tokens"] + self.previous["completion_tokens"]
                     - self.block_size)
            assert usage["prompt_tokens_details"]["cached_tokens"] >= floor, (usage,
                                                                             self.previous)
            # The turn it extends, hidden parts included, is in the replayed ids as it was.
            after = self.record()
            assert any(list(after.ids[: len(r.ids)]) == list(r.ids)
                       and set(r.spans) <= set(after.spans) for r in before), after.spans
        self.previous = usage
        return message, usage

    def _plain(self, call: dict) -> tuple[dict, dict]:
        completion = self.sdk.chat.completions.create(**call)
        message = completion.choices[0].message.model_dump(exclude_none=True)
        return message, completion.usage.model_dump()

    def _streamed(self, call: dict) -> tuple[dict, dict]:
        chunks = self.sdk.chat.completions.create(**call, stream=True,
                                                  stream_options={"include_usage": True})
        message: dict = {"role": "assistant", "content": ""}
        calls: dict[int, dict] = {}
        usage: dict = {}
        for chunk in chunks:
            if chunk.usage is not None:
                usage = chunk.usage.model_dump()
            for choice in chunk.choices:
                delta = choice.delta.model_dump(exclude_none=True)
                message["content"] += delta.get("content") or ""
                if delta.get("reasoning_content"):
                    message["reasoning_content"] = (message.get("reasoning_content", "")
                                                    + delta["reasoning_content"])
                for call in delta.get("tool_calls") or ():
                    calls.setdefault(call["index"], {k: v for k, v in call.items()
                                                     if k != "index"})
        if calls:
            message["tool_calls"] = [calls[i] for i in sorted(calls)]
        return message, usage

    def record(self):
        return self.memory.latest_record(self.user, self.session)

    def answer_text(self) -> str:
        """The last record's answer as the model wrote it, after its generation prompt."""
        answer = self.prompt_text().rsplit("<|im_start|>assistant\n", 1)[1]
        return answer.removeprefix("<think>\n\n</think>\n\n")

    def kinds(self) -> list[str]:
        return [s.kind for s in self.record().spans]

    def prompt_text(self) -> str:
        return self.tokenizer.decode(list(self.record().ids))

    def due(self) -> list[str]:
        """The writer's triggers for this conversation."""
        return [t for _, session, t in self.memory.idle.triggers.due() if session == self.session]


def add_note(memory, title: str, body: str) -> str:
    store = memory.store(memory.settings.user_name)
    result = store.add(title=title, body=body, kind="reference", scope="user", source="cli",
                       has_user_message=True)
    assert result.ok
    return result.note.id


@pytest.mark.parametrize("send_back", ["reasoning_content", "reasoning", None],
                         ids=["reasoning-sent-back", "reasoning-sent-back-by-vllms-name",
                              "reasoning-dropped"])
def test_reasoning_sent_back_or_dropped_keeps_the_replay(talk, send_back, tiny_profile):
    """An answer's reasoning is replayed the turn after it; where the template drops it
    once a user message follows (Qwen3's, Qwen2.5's), the turn after that renders the
    answer afresh without it, once, so the prompt never grows by reasoning."""
    from server.turn.replay import _drops_earlier_reasoning

    chat = talk(chat_template_kwargs={"enable_thinking": True})
    drops = _drops_earlier_reasoning(chat.tokenizer)
    history = [{"role": "user", "content": "Which port does the api use?"}]
    usages = []
    for turn in range(4):
        # turn 2 is the one that drops turn 0's reasoning: it extends turn 0 only
        extends = turn != 2 or not drops
        message, usage = chat.send(history, f"<think>\nLet me think, turn {turn}.\n</think>"
                                            f"\n\nPort 80{turn}.", extends=extends)
        usages.append(usage)
        assert message["reasoning_content"] == f"Let me think, turn {turn}."
        sent = {"role": "assistant", "content": message["content"]}
        if send_back:
            sent[send_back] = message["reasoning_content"]
        history += [sent, {"role": "user", "content": f"And question {turn + 2}?"}]
        if turn == 1:
            assert "Let me think, turn 0." in chat.prompt_text()  # replayed once
        if turn == 2 and drops:
            assert usage["prompt_tokens_details"]["cached_tokens"] >= (
                usages[0]["prompt_tokens"] - tiny_profile.block_size)
            text = chat.prompt_text()
            assert "turn 0." not in text and "turn 1." not in text  # dropped, once
            assert "Port 800." in text and "Port 801." in text
    assert chat.kinds().count("shared") == 1
    assert ("Let me think, turn 0." in chat.prompt_text()) is not drops


def test_a_tool_loop_with_parallel_calls_keeps_the_replay(talk):
    chat = talk(tools=TOOLS)
    history = [{"role": "user", "content": "Read a.txt and b.txt"}]
    calls = ('<tool_call>\n{"name": "read_file", "arguments": {"path": "a.txt"}}\n</tool_call>\n'
             '<tool_call>\n{"name": "read_file", "arguments": {"path": "b.txt"}}\n</tool_call>')
    message, _ = chat.send(history, calls)
    assert not message.get("content")  # no stray newline between the calls
    assert [c["function"]["name"] for c in message["tool_calls"]] == ["read_file"] * 2
    history += [message] + [{"role": "tool", "tool_call_id": c["id"], "content": f"text {n}"}
                            for n, c in enumerate(message["tool_calls"])]
    message, _ = chat.send(history, "Both files hold text.")
    history += [message, {"role": "user", "content": "Thanks."}]
    chat.send(history, "You are welcome.")
    assert chat.kinds().count("shared") == 1


def test_a_tool_loop_of_six_steps_is_served_from_the_cache_at_every_step(talk):
    chat = talk(tools=TOOLS)
    history = [{"role": "user", "content": "Read the six parts of the report."}]
    for step in range(6):
        call = ('<tool_call>\n{"name": "read_file", "arguments": {"path": "part'
                f'{step}.txt"}}}}\n</tool_call>')
        message, _ = chat.send(history, call)  # each step: cached >= the last prompt + answer
        (sent,) = message["tool_calls"]
        assert json.loads(sent["function"]["arguments"]) == {"path": f"part{step}.txt"}
        history += [message, {"role": "tool", "tool_call_id": sent["id"],
                              "content": f"part {step} says {step * 7}"}]
    chat.send(history, "The parts add up.")
    assert chat.kinds().count("shared") == 1


def test_regenerating_an_answer_gets_its_notes_again_and_sets_off_no_compaction(
        talk, memory):
    tag = uuid.uuid4().hex[:6]
    note = add_note(memory, f"deploy runbook {tag}", f"deploy {tag} with make deploy from the "
                    "release branch")
    chat = talk()
    first = [{"role": "user", "content": "Hello there."}]
    message, _ = chat.send(first, "Hi.")
    chat.send(first, "Hello!", extends=False)  # regenerate turn 1
    assert chat.kinds().count("shared") == 1  # the card is there on the new attempt too
    second = [*first, message, {"role": "user", "content": f"How do we deploy {tag} from "
                                                           "the release branch?"}]
    chat.send(second, "With make deploy.")
    (chosen,) = [s.note_ids for s in chat.record().spans if s.kind == "notes"]
    assert note in chosen  # (the server's store may hold other deploy notes: shared)
    chat.send(second, "Run make deploy.", extends=False)  # regenerate turn 2
    again = [s.note_ids for s in chat.record().spans if s.kind == "notes"]
    assert again == [chosen]  # the new attempt has them too
    assert chat.due() == []


def test_an_edited_first_message_keeps_the_card_and_sets_off_no_compaction(talk):
    chat = talk()
    message, _ = chat.send([{"role": "user", "content": "Helo, typo here."}], "Hi.")
    chat.send([{"role": "user", "content": "Hello, no typo."}], "Hi again.", extends=False)
    assert chat.kinds()[0] == "shared" and "<tandem_memory" in chat.prompt_text()
    assert chat.due() == []


def test_a_client_sending_its_last_messages_keeps_the_card_and_no_writer_each_turn(talk):
    chat = talk()
    system = {"role": "system", "content": "You are brief."}
    history: list[dict] = []
    for turn in range(5):
        history.append({"role": "user", "content": f"Question number {turn} about ports?"})
        window = [system, *history[-3:]]
        message, _ = chat.send(window, f"Answer {turn}.", extends=False)
        history.append(message)
        assert "shared" in chat.kinds()
    assert chat.due() == []


def test_a_real_compaction_hands_the_writer_the_dropped_history(talk, memory):
    chat = talk()
    history: list[dict] = []
    for turn in range(3):
        history.append({"role": "user", "content": f"Tell me about part {turn}. " * 20})
        message, _ = chat.send(history, f"Part {turn} is long. " * 60)
        history.append(message)
    dropped = chat.record()
    summary = [{"role": "system", "content": "Summary: we discussed three parts."},
               {"role": "user", "content": "Go on."}]
    chat.send(summary, "Going on.", extends=False)
    assert chat.due() == ["compaction"]
    assert memory.idle.triggers.dropped(chat.user, chat.session) is dropped
    chat.send([*summary, {"role": "assistant", "content": "Going on."},
               {"role": "user", "content": "More."}], "More.")
    assert chat.due() == ["compaction"]  # once


def test_the_same_session_name_in_another_project_is_no_compaction_of_the_first(talk):
    """A client naming its sessions alike in two projects: beta's short first turn drops
    nothing of alpha's long history (red when the dropped history was read from the
    session's newest record of any project: alpha's three turns counted as compacted)."""
    chat = talk()
    history: list[dict] = []
    for turn in range(3):
        history.append({"role": "user", "content": f"Tell me about part {turn}. " * 20})
        message, _ = chat.send(history, f"Part {turn} is long. " * 60, project="/w/alpha")
        history.append(message)
    chat.send([{"role": "user", "content": "Hello."}], "Hi.", extends=False,
              project="/w/beta")
    assert chat.due() == []


def test_a_stop_string_ends_the_record_where_the_client_text_ends(talk):
    chat = talk()
    first = [{"role": "user", "content": "Count for me."}]
    message, _ = chat.send(first, "One two three END four five.", stop=["END"])
    assert message["content"] == "One two three "
    assert chat.prompt_text().endswith("One two three ")
    assert "END" not in chat.prompt_text() and "four" not in chat.prompt_text()
    chat.send([*first, message, {"role": "user", "content": "Go on."}], "Four.")


def test_a_status_line_the_model_wrote_itself_is_kept_and_matches(talk):
    chat = talk()
    first = [{"role": "user", "content": "Say the odd line."}]
    message, _ = chat.send(first, "Here it is.\n› remembered: not a real note")
    assert message["content"].endswith("› remembered: not a real note")
    chat.send([*first, message, {"role": "user", "content": "Thanks."}], "Ok.")
    assert "not a real note" in chat.prompt_text()


def test_a_real_status_line_sent_back_is_taken_off_and_the_block_replayed(talk):
    chat = talk()
    title = f"cache host {uuid.uuid4().hex[:6]}"
    first = [{"role": "user", "content": "Remember the cache host."}]
    message, _ = chat.send(first, "Noted. " + BLOCK.format(title=title))
    assert message["content"].endswith(f"› remembered: {title}")
    chat.send([*first, message, {"role": "user", "content": "Thanks."}], "Ok.")
    text = chat.prompt_text()
    assert f"title: {title}" in text and "› remembered" not in text
    assert "block" in chat.kinds()


def test_a_status_line_sent_back_on_a_miss_is_taken_off_by_what_was_shown(talk):
    chat = talk()
    title = f"cache host {uuid.uuid4().hex[:6]}"
    first = [{"role": "user", "content": "Remember the cache host."}]
    message, _ = chat.send(first, "Noted. " + BLOCK.format(title=title))
    chat.session += "-elsewhere"  # the same history in another session: nothing replays
    chat.send([*first, message, {"role": "user", "content": "Thanks."}], "Ok.",
              extends=False)
    text = chat.prompt_text()
    assert "Noted." in text and "› remembered" not in text  # rendered without the line


def test_a_stopped_stream_records_what_the_client_saw(template_served, tiny_profile):
    served = template_served
    ledger = served.app.state.tandem.memory
    user = served.app.state.tandem.memory.settings.user_name
    session = f"stopped-{uuid.uuid4().hex[:8]}"
    first = [{"role": "user", "content": "Tell me a long story."}]
    script = " ".join(f"word{n}" for n in range(400))
    seen = ""
    with httpx.Client(base_url=served.base_url, timeout=60) as client:
        with client.stream("POST", "/v1/chat/completions", headers={
                "X-Tandem-Session": session}, json={
                "model": "tiny", "messages": first, "script": script, "stream": True}) as r:
            for line in r.iter_lines():
                if line.startswith("data: {"):
                    delta = json.loads(line[6:])["choices"][0]["delta"]
                    seen += delta.get("content") or ""
                if len(seen) > 200:
                    break
    eventually(lambda: ledger.latest_record(user, session) is not None, timeout=30)
    record = ledger.latest_record(user, session)
    triggers = served.app.state.tandem.memory.idle.triggers
    assert (user, session, "give_up") in triggers.due()  # the writer will look at it
    tokenizer = served.app.state.tandem.engine.tokenizer
    answer = tokenizer.decode(list(record.ids)).rsplit("<|im_start|>assistant\n", 1)[1]
    answer = answer.removeprefix("<think>\n\n</think>\n\n")
    assert answer.startswith(seen) and len(answer) < len(script)
    assert "shared" in [s.kind for s in record.spans]
    second = [*first, {"role": "assistant", "content": answer},
              {"role": "user", "content": "Go on."}]
    with httpx.Client(base_url=served.base_url, timeout=60) as client:
        usage = client.post("/v1/chat/completions", headers={"X-Tandem-Session": session},
                            json={"model": "tiny", "messages": second,
                                  "script": "The end."}).json()["usage"]
    latest = ledger.latest_record(user, session)
    assert tuple(latest.ids[: len(record.ids)]) == tuple(record.ids)  # replayed as it was
    assert usage["prompt_tokens_details"]["cached_tokens"] >= len(record.ids) - 2 * (
        tiny_profile.block_size)


def text_of_tokens(count_tokens, tokens: int, word: str) -> str:
    """A text of exactly `tokens` tokens as the compaction rule counts them."""
    for repeats in range(max(1, tokens - 8), tokens + 8):
        text = " ".join([word] * repeats)
        if count_tokens(text) == tokens:
            return text
    raise AssertionError(f"no text of {tokens} tokens from {word!r}")


@pytest.mark.parametrize("dropped_tokens, trigger", [(511, []), (512, ["compaction"])],
                         ids=["511-tokens-dropped", "512-tokens-dropped"])
def test_history_dropped_under_512_tokens_sets_off_nothing_and_512_sets_off_the_writer(
        template_served, tmp_path, dropped_tokens, trigger):
    app = InProcessApp(template_served, tmp_path)
    count = app.app.state.tandem.engine.count_tokens
    session = {"X-Tandem-Session": f"line-{dropped_tokens}"}
    answer = text_of_tokens(count, 100, "answer")
    question = text_of_tokens(count, dropped_tokens - 100, "question")
    content, _, _ = app.chat([{"role": "user", "content": question}], answer, headers=session)
    assert content == answer
    record = app.memory.latest_record("tester", session["X-Tandem-Session"])
    # The history about to be dropped (beside the tools pseudo-message: the catalog).
    assert [(m.role, count(m.content)) for m in record.messages if m.role != "tools"] == [
        ("user", dropped_tokens - 100), ("assistant", 100)]
    app.chat([{"role": "system", "content": "Summary: questions were asked."},
              {"role": "user", "content": "Go on."}], "Going on.", headers=session)
    due = [t for _, s, t in app.memory.idle.triggers.due() if s == session["X-Tandem-Session"]]
    assert due == trigger
