"""The memory routes' POST forms with the key and the session's token in the JSON body
(server/access/body_credentials.py), as a client behind vllm-router sends them: the
router forwards `/v1/memory...` without the client's headers or query string
(docs/serving/replicas.md, "What passes the router"). The replicas lane checks the same
through the real router (tests/replicas/test_router_routes.py)."""

from __future__ import annotations

import pytest

from server.access.auth import Auth
from server.access.body_credentials import MAX_MEMORY_BODY_BYTES
from server.access.keys import KeyStore
from tests.inprocess import InProcessApp

BLOCK = ('<tandem_memory op="add" scope="user" kind="reference">\ntitle: {title}\n\n'
         "{title} is kept in the green binder.\n</tandem_memory>")


@pytest.fixture
def keys(tmp_path) -> KeyStore:
    return KeyStore(tmp_path)


@pytest.fixture
def app(served, tmp_path, keys) -> InProcessApp:
    return InProcessApp(served, tmp_path, auth=Auth(api_key="engine-key", keys=keys))


def test_search_read_and_write_take_the_key_and_token_from_the_body(app, keys):
    alice, bob = keys.add("alice"), keys.add("bob")
    _, _, answer = app.chat([{"role": "user", "content": "Remember the manual."}],
                            "Ok. " + BLOCK.format(title="boiler manual"),
                            headers={"Authorization": f"Bearer {alice}"})
    token = answer.headers["x-tandem-memory-token"]
    body = {"api_key": alice, "memory_token": token}
    found = app.request("POST", "/v1/memory/search", json={"q": "boiler manual", **body})
    assert found.status_code == 200, found.text
    (hit,) = found.json()["data"]
    assert hit["title"] == "boiler manual"
    read = app.request("POST", "/v1/memory/read", json={"id": hit["id"], **body})
    assert read.status_code == 200 and read.json()["title"] == "boiler manual"
    wrote = app.request("POST", "/v1/memory", json={
        "op": "add", "scope": "user", "kind": "reference", "title": "garage code",
        "body": "The garage code is 4471.", **body})
    assert wrote.status_code == 200, wrote.text
    assert {n.title for n in app.memory.store("alice").list()} == {"boiler manual",
                                                                    "garage code"}
    # the GET form with headers answers the same (a replica called directly)
    direct = app.request("GET", "/v1/memory/search", params={"q": "boiler manual"},
                         headers={"Authorization": f"Bearer {alice}",
                                  "X-Tandem-Memory-Token": token})
    assert [h["id"] for h in direct.json()["data"]] == [hit["id"]]
    # another user's key in the body: refused as the header would be
    stolen = app.request("POST", "/v1/memory/search", json={**body, "q": "x", "api_key": bob})
    assert stolen.status_code == 403
    assert stolen.json()["error"]["code"] == "invalid_memory_token"
    # no key at all, or a wrong one, a 401; a header sent wins over the body
    for sent in ({"json": {"q": "x", "memory_token": token}},
                 {"json": {**body, "q": "x", "api_key": "sk-wrong"}},
                 {"json": {**body, "q": "x"}, "headers": {"Authorization": "Bearer sk-wrong"}}):
        assert app.request("POST", "/v1/memory/search", **sent).status_code == 401, sent


def test_only_the_memory_routes_lift_and_only_a_small_body(app, keys):
    alice = keys.add("alice")
    chat = app.request("POST", "/v1/chat/completions", json={
        "model": "tiny", "messages": [{"role": "user", "content": "hi"}], "script": "Hi.",
        "api_key": alice})
    assert chat.status_code == 401  # the chat routes keep their key in the header
    big = app.request("POST", "/v1/memory", json={"api_key": alice,
                                                  "body": "x" * (MAX_MEMORY_BODY_BYTES + 1)})
    assert big.status_code == 413
    assert big.json()["error"]["code"] == "body_too_large"


def test_the_limits_page_states_the_lift_limit():
    from tests.docs_text import docs_text

    assert (f"a `/v1/memory` POST body without `Authorization` (its key read from the body, "
            f"behind vllm-router) | {MAX_MEMORY_BODY_BYTES // 1024} KiB |") in docs_text(
        "docs/serving/limits.md")
