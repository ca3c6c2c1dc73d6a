"""Replicas behind vllm-router sharing one notes root, one writer per user by an etcd
lease (docs/serving/replicas.md). One cluster for the lane (conftest.py); the tests
run in file order: affinity, contention, failover, then the killed replica's restart."""

from __future__ import annotations

import json
import threading
import time

import httpx
import pytest

from bench.replicas.cluster import ROUTE_HEADER, Cluster
from tests.replicas.conftest import USERS

pytestmark = pytest.mark.replicas


def _headers(cluster: Cluster, user: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {cluster.keys[user]}", ROUTE_HEADER: user}


def _chat(cluster: Cluster, user: str, messages: list[dict], url: str | None = None,
          timeout: float = 120) -> httpx.Response:
    return httpx.post(f"{url or cluster.router_url}/v1/chat/completions",
                      headers=_headers(cluster, user), timeout=timeout,
                      json={"model": "tiny", "messages": messages, "max_tokens": 8,
                            "temperature": 0})


def _remember(cluster: Cluster, user: str, fact: str, url: str | None = None,
              deadline_s: float = 60) -> tuple[httpx.Response, float]:
    """'remember that ...' until acknowledged, honouring each 409's Retry-After; the
    answer and the seconds it took."""
    started = time.monotonic()
    while True:
        try:
            answer = _chat(cluster, user, [{"role": "user", "content": f"remember that {fact}"}],
                           url, timeout=30)
        except httpx.HTTPError:
            answer = None
        if answer is not None and answer.status_code == 200:
            return answer, time.monotonic() - started
        if time.monotonic() - started > deadline_s:
            raise AssertionError(f"not acknowledged in {deadline_s} s: "
                                 f"{answer.status_code if answer else 'no answer'} "
                                 f"{answer.text[:300] if answer else ''}")
        wait = 0.5
        if answer is not None and answer.status_code == 409:
            wait = min(float(answer.headers.get("Retry-After", "1")), 5)
        time.sleep(wait)


def _note_texts(cluster: Cluster, user: str) -> str:
    folder = cluster.shared / "notes" / user
    return "\n".join(p.read_text() for p in folder.rglob("*.md") if "archive" not in p.parts)


def _journal(cluster: Cluster) -> list[dict]:
    path = cluster.shared / "journal.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_each_users_later_turn_is_cached_on_their_replica(cluster):
    """50 users, two turns each through the router: the second turn's prompt finds
    >= 0.95 of the first turn's prompt in the prefix cache (one replica kept it)."""
    worst = 1.0
    for user in USERS:
        first = [{"role": "user", "content": f"Hello, I am {user}. Tell me about tides."}]
        one = _chat(cluster, user, first)
        assert one.status_code == 200, one.text
        answer = one.json()["choices"][0]["message"]["content"]
        two = _chat(cluster, user, [*first, {"role": "assistant", "content": answer},
                                    {"role": "user", "content": "And the moon?"}])
        assert two.status_code == 200, two.text
        cached = (two.json()["usage"].get("prompt_tokens_details") or {}).get(
            "cached_tokens") or 0
        worst = min(worst, cached / one.json()["usage"]["prompt_tokens"])
    print(f"[replicas] affinity: worst later-turn cached fraction {worst:.3f}")
    assert worst >= 0.95


def test_a_routing_header_naming_another_user_is_refused(cluster):
    answer = httpx.post(f"{cluster.router_url}/v1/chat/completions", timeout=60,
                        headers={"Authorization": f"Bearer {cluster.keys['user01']}",
                                 ROUTE_HEADER: "user02"},
                        json={"model": "tiny", "messages": [{"role": "user", "content": "hi"}],
                              "max_tokens": 4})
    assert answer.status_code == 400
    assert answer.json()["error"]["param"] == ROUTE_HEADER.lower()


def test_two_replicas_asked_to_write_one_user_at_once_one_wins(cluster):
    a, b = cluster.nodes[:2]
    answers: dict[str, httpx.Response] = {}

    def write(node) -> None:
        answers[node.name] = _chat(cluster, "user49", [{"role": "user", "content":
                                   f"remember that my desk is by window {node.name}"}],
                                   node.url)

    threads = [threading.Thread(target=write, args=(n,)) for n in (a, b)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    statuses = sorted(r.status_code for r in answers.values())
    assert statuses == [200, 409], {k: r.text[:200] for k, r in answers.items()}
    busy = next(r for r in answers.values() if r.status_code == 409)
    assert busy.json()["error"]["code"] == "lease_busy"
    assert int(busy.headers["Retry-After"]) >= 1
    winner = next(name for name, r in answers.items() if r.status_code == 200)
    assert busy.headers["X-Tandem-Writer"] == winner == cluster.holder("user49")


def test_a_refused_write_leaves_its_replica_in_the_router(cluster):
    """A user whose lease another replica holds is refused on the replica the router
    hashes them to, again and again; that replica stays in the router. (With a 503 the
    router retried each refusal five times and counted each as the replica failing: two
    refusals opened its circuit breaker, and with one replica left no one was served for
    a minute; here the third write would reach the writer instead.)"""
    user = USERS[40]
    _remember(cluster, user, f"{user} parks on level one")  # through the router
    hashed_to = cluster.node(cluster.holder(user))  # the replica the router sends them to
    writer = next(n for n in cluster.nodes if n is not hashed_to)
    # the other replica takes the lease once the first lets it go (idle past its
    # TANDEM_LEASE_IDLE_S)
    _remember(cluster, user, f"{user} parks on level two", writer.url)
    for _ in range(4):
        busy = _chat(cluster, user, [{"role": "user", "content": f"remember that {user} "
                                      "parks on level three"}])
        assert busy.status_code == 409, busy.text[:300]
        assert busy.json()["error"]["code"] == "lease_busy"
        assert busy.headers["X-Tandem-Writer"] == writer.name
        assert int(busy.headers["Retry-After"]) >= 1
    assert cluster.holder(user) == writer.name


def test_a_killed_replicas_users_fail_over_and_lose_no_acknowledged_note(cluster):
    users = USERS[:12]
    acknowledged: dict[str, list[str]] = {u: [] for u in users}
    for user in users:
        fact = f"{user} keeps the spare key in the blue jar"
        answer, _ = _remember(cluster, user, fact)
        assert "remembered" in answer.headers.get("X-Tandem-Memory-Command", ""), answer.text
        acknowledged[user].append(fact)
    victim = cluster.nodes[0]
    moved = [u for u in users if cluster.holder(u) == victim.name]
    assert moved, "no user of the first replica among the twelve"
    cluster.kill_replica(victim)  # kill -9: its leases stay until their ttl
    killed = time.monotonic()
    # the router's health checks (every 1 s, one failure) take the dead replica out
    for user in moved:
        while True:
            try:
                answer = _chat(cluster, user, [{"role": "user", "content": "still there?"}],
                               timeout=20)
                if answer.status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() - killed < 30, "no failover within 30 s"
            time.sleep(0.3)
    failover_s = time.monotonic() - killed
    # the other replica takes each lease once it expires (3 s) and writes
    for user in moved:
        fact = f"{user} moved the spare key to the red tin"
        answer, _ = _remember(cluster, user, fact)
        assert "remembered" in answer.headers.get("X-Tandem-Memory-Command", ""), answer.text
        acknowledged[user].append(fact)
        # the write needed a lease, and only the living replica can hold one now (it may
        # have let it go already: a user idle past TANDEM_LEASE_IDLE_S on a slow machine);
        # that it was a new lease shows in the token below, higher than the dead one's
        assert cluster.holder(user) in (cluster.nodes[1].name, None)
    print(f"[replicas] failover: {len(moved)} users served again {failover_s:.1f} s "
          "after the kill")
    for user, facts in acknowledged.items():
        texts = _note_texts(cluster, user)
        for fact in facts:
            assert fact.split(" ", 1)[1] in texts, (user, fact)
    # every write carried a token; a user's tokens only rise, the new writer's higher
    for user in users:
        writes = [e for e in _journal(cluster) if e.get("user") == user and e.get("ok")
                  and e.get("op") in ("add", "update", "edit")]
        assert writes and all(isinstance(e.get("fence"), int) for e in writes), writes
        tokens = [e["fence"] for e in writes]
        assert tokens == sorted(tokens)
        if user in moved:
            assert tokens[-1] > tokens[0]


def test_a_restarted_replica_rejoins_and_writes_for_its_users_again(cluster):
    victim = cluster.nodes[0]
    cluster.start_replica(victim)
    cluster.wait_replica(victim)
    time.sleep(cluster.lease_idle_s + 2 * cluster.health_interval_s + 1)
    # a user the hash places on the restarted replica: one whose lease it takes
    deadline = time.monotonic() + 60
    back = None
    while back is None and time.monotonic() < deadline:
        for user in USERS[12:40]:
            _remember(cluster, user, f"{user} waters the fern on Fridays")
            if cluster.holder(user) == victim.name:
                back = user
                break
    assert back is not None, "no user came back to the restarted replica"
