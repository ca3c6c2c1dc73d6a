"""Conversations a client does not name are told apart (real engine, scripted answers, each
test once a chat template): by their opening and first answer, by user and by project. A
conversation replays its own records only, and keeps its prefix cache every turn however
many others share its opening."""

from __future__ import annotations

import uuid

import pytest

from tests.inprocess import WITH_INDEX, InProcessApp


@pytest.fixture
def app(template_app) -> InProcessApp:
    return template_app


def floor(previous: dict, block_size: int) -> int:
    """What a turn that extends the previous one must find cached."""
    return previous["prompt_tokens"] + previous["completion_tokens"] - block_size


def test_five_conversations_opening_with_hi_keep_their_cache_interleaved(app, tiny_profile):
    opening = [{"role": "user", "content": "hi"}]
    histories, previous = [], []
    for n in range(5):  # five chats, no session header, the same first message
        content, usage, _ = app.chat(opening, f"Hello, chat number {n}.")
        histories.append([*opening, {"role": "assistant", "content": content}])
        previous.append(usage)
    tokens: list[set[str]] = [set() for _ in range(5)]
    for turn in range(2):
        for n in range(5):  # interleaved: each chat's turn between the others'
            histories[n].append({"role": "user", "content": f"Turn {turn} of chat {n}?"})
            content, usage, response = app.chat(histories[n], f"Answer {turn} for chat {n}.")
            assert usage["prompt_tokens_details"]["cached_tokens"] >= floor(
                previous[n], tiny_profile.block_size), (n, turn, usage, previous[n])
            histories[n].append({"role": "assistant", "content": content})
            previous[n] = usage
            tokens[n].add(response.headers["x-tandem-memory-token"])
    assert all(len(t) == 1 for t in tokens) and len(set.union(*tokens)) == 5
    records = {r.session: r for r in app.memory.records("tester")}
    assert len(records) == 5
    for record in records.values():  # each replays its own turns, none of another chat's
        text = app.app.state.tandem.engine.tokenizer.decode(list(record.ids))
        (mine,) = {n for n in range(5) if f"chat number {n}." in text}
        assert all(f"chat {other}" not in text for other in range(5) if other != mine)


def project_note(app: InProcessApp, project: str, title: str) -> None:
    store = app.memory.store("tester")
    result = store.add(title=title, body=f"{title}: only {project} uses it.",
                       kind="reference", scope="project", project=project, source="cli",
                       has_user_message=True)
    assert result.ok


@pytest.mark.parametrize("named", [False, True], ids=["derived", "named-session"])
def test_two_projects_with_the_same_opening_never_replay_each_others_notes(
        template_served, tmp_path, tiny_profile, named):
    # the index lists a project's notes in its shared context: the part a replay must
    # never carry into another project
    app = InProcessApp(template_served, tmp_path, memory_changes=WITH_INDEX)
    tag = uuid.uuid4().hex[:6]
    project_note(app, "/w/alpha", f"alpha deploy key {tag}")
    opening = [{"role": "user", "content": "What do we deploy with?"}]
    session = {"X-Tandem-Session": f"same-name-{tag}"} if named else {}
    alpha = {"X-Tandem-Project": "/w/alpha", **session}
    beta = {"X-Tandem-Project": "/w/beta", **session}
    content, first_alpha, _ = app.chat(opening, "With the key.", headers=alpha)
    app.chat(opening, "With the key.", headers=beta)
    second = [*opening, {"role": "assistant", "content": content},
              {"role": "user", "content": "Thanks."}]
    _, usage, _ = app.chat(second, "Welcome.", headers=beta)
    tokenizer = app.app.state.tandem.engine.tokenizer
    beta_text = tokenizer.decode(list(latest(app, "/w/beta").ids))
    assert f"alpha deploy key {tag}" not in beta_text
    _, usage, _ = app.chat(second, "Welcome.", headers=alpha)
    assert usage["prompt_tokens_details"]["cached_tokens"] >= floor(first_alpha,
                                                                    tiny_profile.block_size)
    assert f"alpha deploy key {tag}" in tokenizer.decode(list(latest(app, "/w/alpha").ids))


def latest(app: InProcessApp, project: str):
    """The most recent record made in `project`."""
    (record, *_) = [r for r in reversed(app.memory.records("tester"))
                    if r.project == project]
    return record


PROXY = "10.9.9.9"


def test_relayed_users_whose_names_are_no_folder_keep_their_own_cache_and_memory(
        served, tmp_path, tiny_profile):
    """`josé` and `o'brien` from a trusted proxy: each a user of their own (a folder named
    by a slug and a hash), never one shared "nobody" with one prefix-cache salt."""
    app = InProcessApp(served, tmp_path, trusted_proxies=frozenset({PROXY}), client_host=PROXY)
    tag = uuid.uuid4().hex
    private = [{"role": "user", "content": " ".join(
        f"Private ledger line {n} of {tag}: account {n * 7919 % 1000}." for n in range(40))}]
    jose, obrien = {"X-Tandem-User": "josé".encode()}, {"X-Tandem-User": "o'brien"}
    _, first, _ = app.chat(private, "Noted.", headers=jose)
    assert first["prompt_tokens"] > 8 * tiny_profile.block_size
    _, other, _ = app.chat(private, "Noted.", headers=obrien)  # the same prompt, another user
    assert other["prompt_tokens_details"]["cached_tokens"] == 0, other
    _, again, _ = app.chat(private, "Noted.", headers=jose)  # josé's own cache still holds
    assert again["prompt_tokens_details"]["cached_tokens"] >= (
        first["prompt_tokens"] - tiny_profile.block_size), again
    block = ('<tandem_memory op="add" scope="user" kind="reference">\ntitle: {t}\n\n'
             'The build uses node 20.\n</tandem_memory>')
    for headers, title in ((jose, "josé builds"), (obrien, "o'brien builds")):
        app.chat([{"role": "user", "content": "We use node 20."}],
                 "Ok. " + block.replace("{t}", title), headers=headers)
    folders = sorted(p.name for p in (tmp_path / "memory" / "notes").iterdir())
    assert len(folders) == 2 and folders[0].startswith("jose--"), folders
    assert folders[1].startswith("o-brien--"), folders
    for folder, title in zip(folders, ("josé builds", "o'brien builds"), strict=True):
        assert [n.title for n in app.memory.store(folder).list()] == [title]


@pytest.mark.parametrize("name", ["", "  ", "a\x01b", "x" * 129])
def test_a_relayed_name_that_can_be_no_ones_is_a_400_saying_why(served, tmp_path, name):
    app = InProcessApp(served, tmp_path, trusted_proxies=frozenset({PROXY}), client_host=PROXY)
    response = app.request("POST", "/v1/chat/completions",
                           headers={"X-Tandem-User": name.encode()},
                           json={"model": "tiny", "script": "ok", "max_tokens": 4,
                                 "messages": [{"role": "user", "content": "hi"}]})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["code"] == "invalid_user" and error["param"] == "x-tandem-user"
    assert "X-Tandem-User" in error["message"]
    assert not (tmp_path / "memory" / "notes").exists() or not any(
        (tmp_path / "memory" / "notes").iterdir())
