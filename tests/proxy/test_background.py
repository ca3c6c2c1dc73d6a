"""Background work through the proxy: the writer on the backend (and never beside a
client), a paid backend's budget, a cognition job, two users' own notes and cache."""

from __future__ import annotations

import json
import re
import threading
import time

import httpx
import pytest

from tests.proxy.conftest import (
    BLOCK,
    USER,
    cache_counters,
    chat,
    proxy_app,
    vllm_backend,
)
from tests.served import ServedApp
from tests.shapes import stream_events

pytestmark = pytest.mark.endpoint


WRITER_BLOCK = ('<tandem_memory op="add" scope="user" kind="reference">\ntitle: tea before '
                'noon\n\nThe user drinks tea before noon, never coffee.\n</tandem_memory>')


def run_writer(base: str, session: str, **scripts) -> dict:
    response = httpx.post(f"{base}/v1/conductor/writer/run", timeout=120,
                          json={"session": session, **scripts})
    assert response.status_code == 200, response.text
    return response.json()


def backend_requests(backend: str) -> float:
    """Requests the backend has finished, by its own counter."""
    text = httpx.get(f"{backend.removesuffix('/v1')}/metrics", timeout=10).text
    return sum(float(m) for m in re.findall(r"^vllm:request_success_total\{[^}]*\} (\S+)$",
                                            text, re.MULTILINE))


def test_the_writer_runs_on_the_backend_and_its_notes_are_stored(proxy):
    assert chat(proxy.base_url, [{"role": "user", "content": "I only drink tea before noon"}],
                script="Tea it is.", session="drinks").status_code == 200
    run = run_writer(proxy.base_url, "drinks", gate_script="yes", script=WRITER_BLOCK)
    assert run["outcome"] == "wrote", run
    [note] = proxy.app.state.tandem.memory.store(USER).list()
    assert note.title == "tea before noon" and note.source == "writer"


def test_a_client_request_closes_the_writers_stream_before_it_reaches_the_backend(proxy):
    assert chat(proxy.base_url, [{"role": "user", "content": "notes on the garden"}],
                script="Noted.", session="garden").status_code == 200
    service = proxy.app.state.tandem.writer
    stats = proxy.app.state.tandem.engine.stats
    runs: list[dict] = []
    writer = threading.Thread(target=lambda: runs.append(run_writer(
        proxy.base_url, "garden", gate_script="yes",
        script=WRITER_BLOCK + " and more" * 400)))
    writer.start()
    deadline = time.monotonic() + 60
    while service.writer.live_tokens < 5 and time.monotonic() < deadline:
        time.sleep(0.005)
    at_arrival = service.writer.live_tokens
    answer = chat(proxy.base_url, [{"role": "user", "content": "quick question"}],
                  script="Quick answer.", session="other")
    writer.join(60)
    assert answer.json()["choices"][0]["message"]["content"] == "Quick answer."
    assert runs and runs[0]["outcome"] == "preempted", runs
    assert at_arrival >= 5 and runs[0]["tokens_generated"] < 400
    assert stats.background_yields["closed_for_client"] == 1
    assert stats.background_yields["client_beside_background"] == 0
    assert proxy.app.state.tandem.memory.store(USER).list() == []  # nothing half-written


def paid_proxy(backend: str, tmp_path, **limits):
    from server.idle.writer_budget import WriterPolicy

    policy = WriterPolicy(price_in=1.0, price_out=4.0, backend="test", **limits)
    served = ServedApp(proxy_app(vllm_backend(backend), tmp_path, writer_policy=policy))
    served.start(ready_timeout=60)
    return served


def spend_rows(served: ServedApp) -> list[dict]:
    path = served.app.state.tandem.memory.root / "cognition" / "spend.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_a_paid_backends_writer_is_charged_a_ledger_row_a_request(plain_vllm_server, tmp_path):
    served = paid_proxy(plain_vllm_server, tmp_path, runs_per_day=1)
    try:
        assert chat(served.base_url, [{"role": "user", "content": "I only drink tea"}],
                    script="Tea.", session="paid").status_code == 200
        hits, _ = cache_counters(plain_vllm_server)
        run = run_writer(served.base_url, "paid", gate_script="yes", script=WRITER_BLOCK)
        assert run["outcome"] == "wrote", run
        rows = spend_rows(served)
        assert [r["client"] for r in rows] == ["harness:writer"] * 2  # the gate, the turn
        record = len(served.app.state.tandem.memory.latest_record(USER, "paid").ids)
        assert all(r["prompt_tokens"] > record and r["run"] == run["run_id"] for r in rows)
        assert rows[1]["completion_tokens"] == run["tokens_generated"]
        # both prompts open with the session's record, which the backend holds cached
        assert cache_counters(plain_vllm_server)[0] - hits >= 2 * (record // 32 * 32 - 32)
        # the day's one run is spent: the next is refused before any request is sent
        before = backend_requests(plain_vllm_server)
        again = run_writer(served.base_url, "paid", gate_script="yes", script=WRITER_BLOCK)
        assert again["outcome"] == "over_budget"
        assert "runs for today are spent" in again["refusals"][0]
        assert backend_requests(plain_vllm_server) == before and len(spend_rows(served)) == 2
    finally:
        served.stop()


def test_a_run_estimated_over_the_daily_cap_sends_nothing(plain_vllm_server, tmp_path):
    served = paid_proxy(plain_vllm_server, tmp_path, daily_usd=0.0001)
    try:
        assert chat(served.base_url, [{"role": "user", "content": "I only drink tea"}],
                    script="Tea.", session="cap").status_code == 200
        before = backend_requests(plain_vllm_server)
        run = run_writer(served.base_url, "cap", gate_script="yes", script=WRITER_BLOCK)
        assert run["outcome"] == "over_budget" and "daily 0.0001 USD" in run["refusals"][0]
        assert backend_requests(plain_vllm_server) == before and spend_rows(served) == []
    finally:
        served.stop()


def test_a_cognition_job_runs_on_the_backend_over_the_conversations_cached_ids(
        plain_vllm_server, tmp_path):
    from tests.inprocess import eventually
    from tests.test_jobs import CONSOLIDATE, wm_answer

    backend = vllm_backend(plain_vllm_server)
    served = ServedApp(proxy_app(backend, tmp_path))
    served.start(ready_timeout=60)
    try:
        for i in range(7):
            response = httpx.post(f"{served.base_url}/v1/conductor/converse", timeout=120,
                                  json={"message": f"turn {i}: we deploy on Friday",
                                        "script": f"noted {i}"})
            assert response.status_code == 200, response.text
        memory = served.app.state.tandem.memory
        eventually(lambda: memory.layers(USER).history.last_seq == 7)
        hits, _ = cache_counters(backend.base)
        record = httpx.post(f"{served.base_url}/v1/conductor/jobs/{CONSOLIDATE}/run",
                            timeout=120, json={"script": wm_answer(active_tasks=[
                                {"id": "new", "text": "deploy on Friday"}])}).json()
        assert record["outcome"] == "changed", record
        assert record["files_changed"] == ["WORKING_MEMORY.md"]
        # the job's prompt opened with the conversation's ids, which the backend held
        last = memory.latest_record(USER, "continuous")
        assert cache_counters(backend.base)[0] - hits >= len(last.ids) // 32 * 32 - 32
    finally:
        served.stop()


def test_two_users_through_a_trusted_proxy_keep_their_own_notes_and_cache(
        plain_vllm_server, tmp_path):
    """X-Tandem-User from a trusted proxy, as in serve: each user's notes and prefix-cache
    salt (vLLM's cache_salt) are their own. Each request's cached tokens are its own usage
    (the backend's, passed on, streamed and not), so the prewarm runs as it does for users:
    its prefill for ann (her head, her new note's branch) sent while bob asks is not counted
    as his, as the backend's counters would count it."""
    backend = vllm_backend(plain_vllm_server)
    app = proxy_app(backend, tmp_path, trusted_proxies=frozenset({"127.0.0.1"}))
    memory = app.state.tandem.memory
    served = ServedApp(app)
    served.start(ready_timeout=60)

    def ask(user: str, stream: bool = False) -> int:
        """The prompt tokens the backend served from its cache for this user's request."""
        body = {"model": "tiny", "max_tokens": 120, "script": BLOCK, "messages": [
            {"role": "user", "content": "my kettle is blue " + "word " * 80}]}
        if stream:
            body |= {"stream": True, "stream_options": {"include_usage": True}}
        response = httpx.post(f"{served.base_url}/v1/chat/completions", timeout=120,
                              headers={"X-Tandem-User": user, "X-Tandem-Session": "s"},
                              json=body)
        assert response.status_code == 200, response.text
        usage = (stream_events(response.text)[-1] if stream else response.json())["usage"]
        return usage["prompt_tokens_details"]["cached_tokens"]

    try:
        assert ask("ann") == 0
        assert ask("ann", stream=True) > 64  # her own prompt, again: cached
        assert ask("bob", stream=True) == 0  # the same prompt, another user: nothing of hers
        assert ask("bob") > 64  # his own, again
        assert [n.title for n in memory.store("ann").list()] == ["the kettle is blue"]
        assert [n.title for n in memory.store("bob").list()] == ["the kettle is blue"]
        assert memory.store(USER).list() == []
    finally:
        served.stop()


def test_proxy_mode_queues_no_record_prefill_and_sends_the_backend_nothing_more(proxy):
    """A hybrid engine's record prefill (server/idle/record_prefill.py) is not proxy
    mode's: the backend's cache is its own (HttpEngine.reuse_block is None), so after an
    answer nothing is queued and an idle moment sends no request."""
    tandem = proxy.app.state.tandem
    assert tandem.engine.reuse_block is None and not tandem.memory.idle.records_due.on
    assert chat(proxy.base_url, [{"role": "user", "content": "where is the kettle?"}],
                script="On the stove.", session="no-record-prefill").status_code == 200
    started = tandem.engine.stats.requests_started["background"]
    assert proxy.run(tandem.record_prefill.tick()) == []
    assert tandem.engine.stats.requests_started["background"] == started
    assert tandem.memory.idle.records_due.take() is None
