"""The hybrid search through the server: the memory route (session token) with `mode` and
`collection`, the admin route, and the index kept in sync in idle time after writes."""

from __future__ import annotations

import pytest

from tests.inprocess import InProcessApp


@pytest.fixture
def app(served, tmp_path) -> InProcessApp:
    return InProcessApp(served, tmp_path)


def token_of(app: InProcessApp) -> str:
    _, _, response = app.chat([{"role": "user", "content": "hello there"}], "Hi.",
                               headers={"X-Tandem-Session": "search-test"})
    return response.headers["x-tandem-memory-token"]


def write_note(app: InProcessApp, token: str, title: str, body: str) -> None:
    response = app.request("POST", "/v1/memory", headers={"X-Tandem-Memory-Token": token},
                           json={"op": "add", "scope": "user", "kind": "gotcha",
                                 "title": title, "body": body})
    assert response.status_code == 200, response.text


def test_a_written_note_is_found_by_meaning_after_the_idle_sync(app, served):
    token = token_of(app)
    write_note(app, token, "staging deploys need the VPN",
               "The staging deploy hangs at login unless the quayside-ops VPN profile is up.")
    search = app.app.state.tandem.search
    assert "tester" in search.stale
    reports = served.run(search.tick())
    assert search.stale == set() and reports[0].chunks_embedded >= 1
    found = app.request("GET", "/v1/memory/search", headers={"X-Tandem-Memory-Token": token},
                        params={"q": "why does pushing to preprod get stuck signing in",
                                "mode": "dense", "collection": "notes"}).json()
    assert found["dense"] is True and found["data"][0]["collection"] == "notes"
    assert "quayside-ops" in found["data"][0]["text"]
    plain = app.request("GET", "/v1/memory/search", headers={"X-Tandem-Memory-Token": token},
                        params={"q": "quayside-ops"}).json()
    assert plain["data"][0]["title"] == "staging deploys need the VPN"  # notes, as before


def test_the_admin_search_answers_local_clients_only(served, app, tmp_path):
    token = token_of(app)
    write_note(app, token, "error E4012", "E4012 means the proxy refused a large body.")
    found = app.request("GET", "/v1/conductor/memory/search", params={"q": "E4012"}).json()
    assert found["mode"] == "hybrid" and found["data"][0]["path"].endswith(".md")
    remote = InProcessApp(served, tmp_path, client_host="192.168.1.20")
    assert remote.request("GET", "/v1/conductor/memory/search",
                          params={"q": "E4012"}).status_code == 403


@pytest.mark.parametrize("params, param", [
    ({"q": "x", "mode": "fuzzy"}, "mode"),
    ({"q": "x", "collection": "books"}, "collection"),
    ({"q": " ", "mode": "hybrid"}, "q"),
    ({"q": "x", "mode": "hybrid", "limit": 0}, "limit"),
])
def test_a_bad_search_gets_a_clear_400(app, params, param):
    token = token_of(app)
    response = app.request("GET", "/v1/memory/search", params=params,
                           headers={"X-Tandem-Memory-Token": token})
    assert response.status_code == 400 and response.json()["error"]["param"] == param
