"""Deleting a user means gone (issue 53): after the Memory screen's delete of a user who
chatted with memory on, no file under $TANDEM_HOME holds a word they said or a folder
named after them, their memory token and API key are refused, and a user made again
under the same name starts with nothing of the old one: no note, no replay, no token,
no cached prompt. One audit line stays in the journal, with counts only.

On the real app and engine (scripted tiny model)."""

from __future__ import annotations

import hashlib
import json
import uuid
from pathlib import Path

from server.access.auth import Auth
from server.access.keys import KeyStore
from server.turn.memory import TOKEN_HEADER
from tests.inprocess import InProcessApp, eventually

ENGINE_USER = "tester"  # InProcessApp's engine user: the admin routes answer its key
DELETE = "/v1/conductor/memory/delete-user"


def bearer(key: str) -> dict:
    return {"Authorization": f"Bearer {key}"}


def block(title: str, body: str) -> str:
    return (f'<tandem_memory op="add" scope="user" kind="reference">\ntitle: {title}\n\n'
            f"{body}\n</tandem_memory>")


def files_holding(home: Path, needles: list[bytes]) -> dict[str, list[str]]:
    """Every file and folder under `home` (binary files too: Qdrant's shard, tantivy's
    segments) whose bytes or path hold one of `needles`: {path relative to home: the
    needles found}."""
    found: dict[str, list[str]] = {}
    for path in sorted(home.rglob("*")):
        rel = path.relative_to(home).as_posix()
        data = path.read_bytes() if path.is_file() and not path.is_symlink() else b""
        hits = [n.decode() for n in needles if n in data or n.decode() in rel]
        if hits:
            found[rel] = hits
    return found


def hashed_names(user: str) -> list[bytes]:
    """The folder and file names the ledger's stores make from a user's name."""
    digest = hashlib.blake2b(user.encode(), digest_size=16).hexdigest()
    return [digest.encode()]


def text_memos(app: InProcessApp) -> list:
    """The process's memos keyed by text a user wrote or kept."""
    from conductor.hidden.tail_notes import note_match_words
    from conductor.memory import hiding
    from server.turn import prompt

    return [note_match_words, hiding._decoded, prompt._hidden_message_ids,
            prompt._shared_context_ids, prompt._head_ids,
            app.app.state.tandem.engine.count_tokens]


def chat_body(content: str, script: str) -> dict:
    return {"model": "tiny", "messages": [{"role": "user", "content": content}],
            "script": script}


def test_a_deleted_user_leaves_nothing_and_a_user_made_again_starts_empty(served, tmp_path):
    user = f"gone-{uuid.uuid4().hex[:8]}"
    marker = f"quokka{uuid.uuid4().hex[:12]}"  # in everything the user says and keeps
    keys = KeyStore(tmp_path)
    admin, key, other = keys.add(ENGINE_USER), keys.add(user), keys.add("bystander")
    app = InProcessApp(served, tmp_path, memory_mode="on", auth=Auth(keys=keys))
    me = bearer(key)

    # A note (a held-back block), a chat record, a shown answer with its status line.
    chatted = app.request("POST", "/v1/chat/completions", headers=me, json=chat_body(
        f"My locker code for {marker} is 4417, keep it.",
        f"Kept. {block(f'Locker {marker}', f'The {marker} locker code is 4417.')}"))
    assert chatted.status_code == 200, chatted.text
    assert "remembered" in chatted.json()["choices"][0]["message"]["content"]
    token = chatted.headers["x-tandem-memory-token"]
    # A turn of the continuous conversation (the history layer).
    app.converse(f"The {marker} trip starts on Monday.", "Monday it is.", headers=me)
    eventually(lambda: any(app.memory.layers(user).files.turns_dir.rglob("*.json")))
    # The notes' tantivy index, and the hybrid index (embedded Qdrant) synced over the
    # notes and the history.
    for mode in (None, "hybrid"):
        found = app.request("GET", "/v1/memory/search", headers={**me, TOKEN_HEADER: token},
                            params={"q": f"{marker} locker", **({"mode": mode} if mode else {})})
        assert found.status_code == 200 and found.json()["data"], found.text
    assert (tmp_path / "memory" / "layers" / user / "embed").is_dir()
    # A stored response.
    made = app.request("POST", "/v1/responses", headers=me, json={
        "model": "tiny", "input": f"My {marker} PIN is 2580.", "script": "Noted."})
    assert made.status_code == 200, made.text
    # A prompt cached under the user's salt (memory off: the same ids again later).
    long_prompt = f"[{marker}] " + "The plan for the quarter, in detail. " * 40
    cached = app.request("POST", "/v1/chat/completions", headers={**me, "X-Tandem-Memory":
                         "off"}, json=chat_body(long_prompt, "A plan."))
    assert cached.status_code == 200
    # The bystander: their memory must come through the delete whole.
    theirs = app.request("POST", "/v1/chat/completions", headers=bearer(other), json=chat_body(
        "Keep my bike lock code.", f"Kept. {block('Bike lock', 'The bike lock is 9911.')}"))
    their_token = theirs.headers["x-tandem-memory-token"]
    app.memory.save_now()  # the write-behind files, as a running server has
    needles = [marker.encode(), user.encode(), *hashed_names(user)]
    before = files_holding(tmp_path, needles)
    assert len(before) >= 8, before  # the test sees the places it checks afterwards

    held = app.memory  # what the process holds of the user, besides the files
    assert user in {g.user for g in held.idle.prewarm.groups()}
    assert user in {u for u, _ in held.idle.triggers._sessions}
    assert sum(memo.cache_info().currsize for memo in text_memos(app)) > 0

    wrong = app.request("POST", DELETE, headers=bearer(admin),
                        json={"user": user, "confirm": "someone"})
    assert wrong.status_code == 400 and wrong.json()["error"]["param"] == "confirm"
    done = app.request("POST", DELETE, headers=bearer(admin),
                       json={"user": user, "confirm": user.upper()})
    assert done.status_code == 200, done.text
    app.memory.save_now()  # nothing the write-behind held brings it back
    served.run(app.app.state.tandem.search.tick())  # nor an idle sync

    report = done.json()
    assert report["notes_deleted"] == 1 and report["records_dropped"] >= 2
    removed = report["removed"]
    assert removed["api_keys"] == 1 and removed["history_turns"] >= 1, removed
    assert removed["session_tokens"] >= 1 and removed["search_index"] == 1, removed
    assert user not in {g.user for g in held.idle.prewarm.groups()}
    assert user not in {u for u, _ in held.idle.triggers._sessions}
    assert user not in {u for u, _ in held.idle.prefetch_due.take()}
    # the memos keyed by text (a note's tail and words, a head, token counts) hold none
    assert [memo.cache_info().currsize for memo in text_memos(app)] == [0] * 6
    assert not held.records(user) and not held._shown.take_changes().get(user)
    left = files_holding(tmp_path, needles)
    assert left == {"memory/journal.jsonl": [user]}, left  # only the delete's entry, below
    journal = [json.loads(line) for line in
               (tmp_path / "memory" / "journal.jsonl").read_text().splitlines()]
    naming = [e for e in journal if e.get("user") == user]
    assert [e["op"] for e in naming] == ["delete_user"], naming
    assert naming[0]["counts"]["notes"] == 1 and naming[0]["via"] == "dashboard"

    # The old key is refused; the old token too, even with a new key of the same name.
    assert app.request("POST", "/v1/chat/completions", headers=me,
                       json=chat_body("hi", "Hi.")).status_code == 401
    again = bearer(keys.add(user))
    refused = app.request("GET", "/v1/memory/search", params={"q": "locker"},
                          headers={**again, TOKEN_HEADER: token})
    assert refused.status_code == 403, refused.text
    # A user made again starts empty: no note, no cached prompt of the old one's.
    fresh = app.request("POST", "/v1/chat/completions", headers={**again, "X-Tandem-Memory":
                        "off"}, json=chat_body(long_prompt, "A plan."))
    assert fresh.json()["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    assert app.memory.store(user).list() == []
    assert app.request("GET", f"/v1/responses/{made.json()['id']}",
                       headers=again).status_code == 404
    # The bystander kept everything.
    assert [n.title for n in app.memory.store("bystander").list()] == ["Bike lock"]
    kept = app.request("GET", "/v1/memory/search", params={"q": "bike lock"},
                       headers={**bearer(other), TOKEN_HEADER: their_token})
    assert kept.status_code == 200, kept.text


def test_a_deleted_users_tokens_and_salt_stay_retired_after_a_restart(tmp_path):
    """The epoch a delete moves on is on disk, under a keyed hash: a restart derives the
    new tokens and salt, the old ones never resolve again, other users keep theirs, and
    no file names the deleted user."""
    from conductor.memory.session_tokens import SessionTokens

    tokens = SessionTokens(tmp_path)
    old, salt = tokens.token_for("annabel", "s1"), tokens.cache_salt("annabel")
    bob, bob_salt = tokens.token_for("bob", "s1"), tokens.cache_salt("bob")
    tokens.save()
    assert tokens.forget_user("annabel") == 1 and tokens.resolve(old) is None
    again = SessionTokens(tmp_path)  # a restart
    assert again.resolve(old) is None and again.resolve(bob) == ("bob", "s1")
    made_again = again.token_for("annabel", "s1")
    assert made_again != old and again.cache_salt("annabel") not in (salt, bob_salt)
    assert again.cache_salt("bob") == bob_salt and again.token_for("bob", "s1") == bob
    again.save()
    assert again.forget_user("annabel") == 1  # deleted twice: a third epoch
    third = SessionTokens(tmp_path)
    assert third.resolve(made_again) is None and third.resolve(old) is None
    assert third.token_for("annabel", "s1") not in (old, made_again)
    assert files_holding(tmp_path, [b"annabel"]) == {}
