"""What passes vllm-router 0.1.17 (docs/serving/replicas.md, "What passes the router"),
on the lane's real router and replicas. The router forwards the client's headers only on
the routes it knows (the chat and completions routes, /v1/models, ...); every other path
reaches the replica with its body but without `Authorization`, `x-api-key` or any
`X-Tandem-*` header, and without its query string. It still places such a request by the
client's `X-User-ID`, on that user's replica. So with keys on those routes are a 401
through the router, and the memory routes have POST forms that carry the key and the
session's token in the body (server/access/body_credentials.py). The table below fails
when a router version starts forwarding a route's headers: then the doc is out of date."""

from __future__ import annotations

import time

import httpx
import pytest

from bench.replicas.cluster import ROUTE_HEADER, Cluster
from tests.replicas.conftest import USERS

pytestmark = pytest.mark.replicas

USER, OTHER = USERS[44], USERS[43]  # no other test of the lane writes for these users
HI = [{"role": "user", "content": "hi"}]

# the routes the router knows: the client's headers reach the replica
PASSED = [
    ("POST", "/v1/chat/completions", {"model": "tiny", "messages": HI, "max_tokens": 4}),
    ("GET", "/v1/models", None),
]
# every other path: the replica sees no key, so with keys on it is a 401 there
LOST = [
    ("POST", "/v1/responses", {"model": "tiny", "input": "hi", "max_output_tokens": 4}),
    ("POST", "/v1/messages", {"model": "tiny", "max_tokens": 4, "messages": HI}),
    ("POST", "/mcp", {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
    ("GET", "/v1/memory/search?q=binder", None),
    ("POST", "/v1/memory/search", {"q": "binder"}),
    ("POST", "/v1/memory", {"op": "add", "title": "t", "body": "b"}),
]


def _headers(cluster: Cluster, user: str, **more: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {cluster.keys[user]}", "x-api-key": cluster.keys[user],
            ROUTE_HEADER: user, **more}


def _send(url: str, method: str, path: str, body: dict | None,
          headers: dict[str, str]) -> httpx.Response:
    return httpx.request(method, url + path, json=body, headers=headers, timeout=120)


@pytest.mark.parametrize("method, path, body", PASSED + LOST,
                         ids=[f"{m} {p}" for m, p, _ in PASSED + LOST])
def test_which_routes_get_the_clients_key_through_the_router(cluster, method, path, body):
    headers = _headers(cluster, USER)
    direct = _send(cluster.nodes[1].url, method, path, body, headers)
    assert direct.status_code != 401, direct.text[:300]  # the key is good on a replica
    routed = _send(cluster.router_url, method, path, body, headers)
    if (method, path, body) in PASSED:
        assert routed.status_code == direct.status_code == 200, routed.text[:300]
    else:  # the router dropped the key (and every other header) on the way
        assert routed.status_code == 401, (
            f"{method} {path} now keeps its key through the router ({routed.status_code}): "
            "update docs/serving/replicas.md, 'What passes the router'")


def _remembered(cluster: Cluster, fact: str) -> str:
    """'remember that `fact`' through the router (until its writer acknowledges it); the
    session's memory token from the answer (given by the user's replica)."""
    deadline = time.monotonic() + 60
    while True:
        answer = httpx.post(f"{cluster.router_url}/v1/chat/completions", timeout=60,
                            headers=_headers(cluster, USER, **{"X-Tandem-Session": "routes"}),
                            json={"model": "tiny", "max_tokens": 8, "temperature": 0,
                                  "messages": [{"role": "user",
                                                "content": f"remember that {fact}"}]})
        if answer.status_code == 200:
            assert "remembered" in answer.headers.get("X-Tandem-Memory-Command", "")
            return answer.headers["X-Tandem-Memory-Token"]
        assert answer.status_code == 409 and time.monotonic() < deadline, answer.text[:300]
        time.sleep(min(float(answer.headers.get("Retry-After", "1")), 5))


def _post(cluster: Cluster, path: str, body: dict, user: str = USER) -> httpx.Response:
    """A memory route's POST form through the router: the credentials in the body, the
    user's name in X-User-ID so the router places it on the replica that gave the token."""
    return httpx.post(f"{cluster.router_url}{path}", json=body, timeout=60,
                      headers={ROUTE_HEADER: user})


def test_the_memory_routes_post_forms_work_through_the_router(cluster):
    token = _remembered(cluster, "the boiler manual is in the green binder")
    credentials = {"api_key": cluster.keys[USER], "memory_token": token}
    found = _post(cluster, "/v1/memory/search", {"q": "boiler manual binder", **credentials})
    assert found.status_code == 200, found.text[:300]
    hits = found.json()["data"]
    assert any("green binder" in f"{h['title']} {h['body']}" for h in hits), hits
    read = _post(cluster, "/v1/memory/read", {"id": hits[0]["id"], **credentials})
    assert read.status_code == 200 and read.json()["id"] == hits[0]["id"], read.text[:300]
    # a write through the router: the user's replica takes (or holds) their lease
    deadline = time.monotonic() + 60
    while True:
        wrote = _post(cluster, "/v1/memory", {"op": "add", "scope": "user",
                                              "kind": "reference", "title": "garage code",
                                              "body": "The garage code is 4471.",
                                              **credentials})
        if wrote.status_code != 409 or time.monotonic() > deadline:
            break
        time.sleep(min(float(wrote.headers.get("Retry-After", "1")), 5))
    assert wrote.status_code == 200, wrote.text[:300]
    again = _post(cluster, "/v1/memory/search", {"q": "garage code", **credentials})
    assert any(h["title"] == "garage code" for h in again.json()["data"]), again.text[:300]
    # the GET form through the router: no key arrives, a 401
    lost = httpx.get(f"{cluster.router_url}/v1/memory/search", params={"q": "boiler"},
                     headers=_headers(cluster, USER, **{"X-Tandem-Memory-Token": token}),
                     timeout=30)
    assert lost.status_code == 401, lost.text[:300]
    # another user's key in the body is refused as the header would be; none, a 401
    stolen = _post(cluster, "/v1/memory/search",
                   {"q": "boiler", **credentials, "api_key": cluster.keys[OTHER]}, OTHER)
    assert stolen.status_code == 403, stolen.text[:300]
    bare = _post(cluster, "/v1/memory/search", {"q": "boiler", "memory_token": token})
    assert bare.status_code == 401, bare.text[:300]
