"""Memory blocks in answers, end to end on the real engine: held back, stored, shown as a
status line, kept as hidden spans so the next turn still hits the prefix cache."""

from __future__ import annotations

import pytest

from tests.inprocess import InProcessApp, eventually

BLOCK = ('<tandem_memory op="add" scope="user" kind="reference">\ntitle: {title}\n'
         'tags: build\n\nThe project builds with node 20 and pnpm.\n</tandem_memory>')


def block(title: str) -> str:
    return BLOCK.replace("{title}", title)


def user(text: str) -> list[dict]:
    return [{"role": "user", "content": text}]


@pytest.fixture
def app(served, tmp_path) -> InProcessApp:
    return InProcessApp(served, tmp_path)


def stored_titles(app: InProcessApp, who: str = "tester") -> list[str]:
    return [n.title for n in app.memory.store(who).list()]


@pytest.mark.parametrize("stream", [False, True])
def test_a_block_is_held_back_stored_and_announced(app, stream):
    script = f"Noted. {block('node 20 and pnpm')} Anything else?"
    content, _, _ = app.chat(user("We use node 20."), script, stream=stream)
    assert "tandem_memory" not in content
    assert content.startswith("Noted.") and "Anything else?" in content
    assert content.endswith("\n\n› remembered: node 20 and pnpm")
    assert stored_titles(app) == ["node 20 and pnpm"]
    (note,) = app.memory.store("tester").list()
    assert note.source == "inline" and note.status == "provisional"


@pytest.mark.parametrize("case, script", [
    ("unclosed", "Sure. " + block("never closed")[:-10]),
    ("too long", "Sure. " + block("long").replace("pnpm.", "pnpm. " + "x" * 2100)),
    ("refused", "Sure. " + block("key sk-abcdefghijklmnopqrstuvwxyz0123456789ABCD")),
    ("malformed", "Sure. <tandem_memory op=add>\ntitle: t\n\nb\n</tandem_memory>"),
])
def test_a_block_that_is_not_taken_goes_out_as_text(app, case, script):
    content, _, _ = app.chat(user("remember this"), script)
    assert content == script, case
    assert stored_titles(app) == []


def test_the_fifth_block_goes_out_as_text(app):
    blocks = [block(f"fact number {n}") for n in range(5)]
    content, _, _ = app.chat(user("five facts"), "".join(blocks))
    assert blocks[4] in content and blocks[3] not in content
    assert content.count("› remembered:") == 4


def test_a_refused_block_is_journaled_without_its_title(app):
    app.chat(user("x"), block("secret sk-abcdefghijklmnopqrstuvwxyz0123456789ABCD"))
    journal = app.memory.store("tester").journal.path.read_text()
    assert '"reason": "secret"' in journal and "sk-abc" not in journal


def test_a_block_inside_the_reasoning_is_left_alone(app):
    script = f"<think>\nmaybe {block('thought only')}\n</think>\n\nAnswer."
    response = app.request("POST", "/v1/chat/completions", json={
        "model": "tiny", "messages": user("q"), "script": script,
        "chat_template_kwargs": {"enable_thinking": True}})
    message = response.json()["choices"][0]["message"]
    assert "thought only" in message["reasoning_content"]
    assert message["content"] == "Answer."
    assert stored_titles(app) == []


def test_memory_off_in_the_profile_passes_blocks_as_text(served, tmp_path):
    app = InProcessApp(served, tmp_path, memory_mode="off")
    script = f"Ok. {block('not stored')}"
    content, _, response = app.chat(user("x"), script)
    assert content == script and stored_titles(app) == []
    assert "x-tandem-memory-token" not in response.headers


def test_header_off_writes_nothing_and_the_journal_says_why(app):
    script = f"Ok. {block('not stored')}"
    content, _, _ = app.chat(user("x"), script, headers={"X-Tandem-Memory": "off"})
    assert content == script and stored_titles(app) == []
    journal = app.memory.store("tester").journal.path
    eventually(lambda: journal.exists() and '"reason": "header_off"' in journal.read_text())


def test_header_read_drops_the_block_and_stores_nothing(app):
    content, _, _ = app.chat(user("x"), f"Ok. {block('dropped')} Bye.",
                             headers={"X-Tandem-Memory": "read"})
    assert content == "Ok.  Bye." and stored_titles(app) == []


def test_an_unknown_memory_header_value_is_400(app):
    response = app.request("POST", "/v1/chat/completions", headers={"X-Tandem-Memory": "maybe"},
                           json={"model": "tiny", "messages": user("x"), "script": "x"})
    assert response.status_code == 400


def test_shadow_stores_blocks(served, tmp_path):
    app = InProcessApp(served, tmp_path, memory_mode="shadow")
    content, _, _ = app.chat(user("x"), f"Ok. {block('shadow fact')}")
    assert content.endswith("› remembered: shadow fact")
    assert stored_titles(app) == ["shadow fact"]


def test_a_relayed_request_without_a_user_reads_and_writes_nothing(served, tmp_path):
    app = InProcessApp(served, tmp_path, trusted_proxies=frozenset({"10.9.9.9"}),
                       client_host="10.9.9.9")
    script = f"Ok. {block('from the proxy')}"
    content, _, _ = app.chat(user("x"), script)
    assert content == script and stored_titles(app) == []
    app.chat(user("y"), script, headers={"X-Tandem-User": "alice"})
    assert stored_titles(app, "alice") == ["from the proxy"]
    assert stored_titles(app, "tester") == []


def test_the_memory_routes_need_the_session_token(app):
    _, _, response = app.chat(user("x"), f"Ok. {block('routed fact')}",
                              headers={"X-Tandem-Session": "s1"})
    token = response.headers["x-tandem-memory-token"]
    assert app.request("GET", "/v1/memory/search", params={"q": "node"}).status_code == 403
    bad = {"X-Tandem-Memory-Token": "nope"}
    assert app.request("GET", "/v1/memory/search", params={"q": "node"},
                       headers=bad).status_code == 403
    good = {"X-Tandem-Memory-Token": token}
    hits = app.request("GET", "/v1/memory/search", params={"q": "node pnpm"}, headers=good)
    assert [h["title"] for h in hits.json()["data"]] == ["routed fact"]
    note_id = hits.json()["data"][0]["id"]
    assert app.request("GET", f"/v1/memory/{note_id}", headers=good).json()["title"] == (
        "routed fact")
    written = app.request("POST", "/v1/memory", headers=good, json={
        "op": "add", "scope": "session", "kind": "gotcha", "title": "route write",
        "body": "written through the route"})
    assert written.status_code == 200 and written.json()["note"]["title"] == "route write"
    refused = app.request("POST", "/v1/memory", headers=good, json={
        "op": "add", "scope": "session", "kind": "gotcha", "title": "x" * 121})
    assert refused.status_code == 422 and refused.json()["error"]["code"] == "title_too_long"


TOOLS = [{"type": "function", "function": {"name": "shell", "parameters": {"type": "object"}}}]


def test_the_card_and_token_go_in_on_the_first_turn_only(app):
    first_turn = app.chat(user("hello"), "Hi.", headers={"X-Tandem-Session": "card"},
                          tools=TOOLS)
    token = first_turn[2].headers["x-tandem-memory-token"]
    record = app.memory.latest_record("tester", "card")
    hidden = [s for s in record.spans if s.kind in ("shared", "session")]
    assert [s.kind for s in hidden] == ["shared", "session"]
    history = [*user("hello"), {"role": "assistant", "content": first_turn[0]}, *user("again")]
    app.chat(history, "Hi again.", headers={"X-Tandem-Session": "card"}, tools=TOOLS)
    second = app.memory.latest_record("tester", "card")
    assert [s for s in second.spans if s.kind in ("shared", "session")] == hidden  # replayed
    decode = app.app.state.tandem.engine.tokenizer.decode
    card_text, session_text = (decode(list(second.ids[s.start:s.end])) for s in hidden)
    assert "<tandem_memory" in card_text and token not in card_text  # shared by sessions
    assert token in session_text  # a model with tools could call the memory routes


def test_without_tools_a_new_session_has_no_per_session_tail(app):
    first_turn = app.chat(user("hello"), "Hi.", headers={"X-Tandem-Session": "no-tools"})
    token = first_turn[2].headers["x-tandem-memory-token"]
    record = app.memory.latest_record("tester", "no-tools")
    assert [s.kind for s in record.spans] == ["shared"]
    assert token not in app.app.state.tandem.engine.tokenizer.decode(list(record.ids))


@pytest.mark.parametrize("memory_mode", ["on", "off"])
def test_the_turn_after_a_block_is_served_from_the_prefix_cache(served, tmp_path, memory_mode,
                                                                tiny_profile):
    app = InProcessApp(served, tmp_path, memory_mode=memory_mode)
    session = {"X-Tandem-Session": f"cache-{memory_mode}"}
    script = "Sure, noted. " + block(f"cache check {memory_mode}") + " Anything else?" * 3
    content, first, _ = app.chat(user("Remember our build setup."), script, headers=session)
    history = [*user("Remember our build setup."), {"role": "assistant", "content": content},
               *user("Thanks. And the tests?")]
    _, second, _ = app.chat(history, "Run make test.", headers=session)
    cached = second["prompt_tokens_details"]["cached_tokens"]
    floor = first["prompt_tokens"] + first["completion_tokens"] - tiny_profile.block_size
    assert cached >= floor, (memory_mode, cached, first)
    if memory_mode == "on":
        assert "› remembered" in content and "tandem_memory" not in content
        # The status line the client sent back was stripped: the prompt never holds it.
        record = app.memory.latest_record("tester", session["X-Tandem-Session"])
        prompt_text = app.app.state.tandem.engine.tokenizer.decode(list(record.ids))
        assert "› remembered: cache check" not in prompt_text
        assert "title: cache check on" in prompt_text  # the hidden block, replayed


def test_any_session_header_value_files_its_notes(app):
    session_block = block("odd session").replace('scope="user"', 'scope="session"')
    content, _, _ = app.chat(user("x"), f"Ok. {session_block}",
                             headers={"X-Tandem-Session": "my chat / #1"})
    assert content.endswith("› remembered: odd session")
    (note,) = app.memory.store("tester").list(scope="session")
    assert note.session.startswith("h-")


def test_a_block_that_restates_a_note_says_updated_not_remembered(app):
    restated = block("staging database port is 5433").replace(
        "title: staging database port is 5433", "title: port 5433 for the staging database")
    first, _, _ = app.chat(user("a"), "Ok. " + block("staging database port is 5433"),
                           headers={"X-Tandem-Session": "restate"})
    assert first.endswith("› remembered: staging database port is 5433")
    again, _, _ = app.chat(user("b"), "Ok. " + restated, headers={"X-Tandem-Session": "restate"})
    assert again.endswith("› updated: port 5433 for the staging database")
    assert len(app.memory.store("tester").list()) == 1


SECRET_BODY = ("key id AKIA" + "IOSFODNN7EXAMPLE secret " + "wJalrXUtnFEMI/K7MDENG/bPxRfiCY"
               + "EXAMPLEKEY")


def test_a_block_that_is_mostly_a_secret_is_refused_and_goes_out_as_text(app):
    raw = BLOCK.replace("{title}", "aws access").replace(
        "The project builds with node 20 and pnpm.", SECRET_BODY)
    content, _, _ = app.chat(user("Keep my AWS key."), "Sure. " + raw,
                             headers={"X-Tandem-Session": "secret-block"})
    assert "› remembered" not in content and "<tandem_memory" in content  # as it was
    assert app.memory.store("tester").list() == []


def test_a_block_with_a_secret_in_its_title_is_refused(app):
    raw = BLOCK.replace("{title}", "token ghp_" + "aB3dE5gH7jK9mN1pQ3sT" + "aB3dE5gH7jK9mN1p")
    content, _, _ = app.chat(user("x"), raw, headers={"X-Tandem-Session": "secret-title"})
    assert "› remembered" not in content and app.memory.store("tester").list() == []


def test_the_memory_route_refuses_a_mostly_secret_body(app):
    _, _, response = app.chat(user("hello"), "Hi.", headers={"X-Tandem-Session": "route"})
    token = {"X-Tandem-Memory-Token": response.headers["x-tandem-memory-token"]}
    refused = app.request("POST", "/v1/memory", headers=token, json={
        "op": "add", "scope": "user", "kind": "reference", "title": "aws access",
        "body": SECRET_BODY})
    assert refused.status_code == 422 and refused.json()["error"]["code"] == "secret"
    assert app.memory.store("tester").list() == []
