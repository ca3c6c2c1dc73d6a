"""An engine core that dies, as an out-of-memory kill would end it: `tandem serve` notices
at once, answers 503 on /readyz and on every request (a stream in flight ends with an error
event), and exits non-zero so that its supervisor restarts it."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import psutil

from bench.load.app_thread import wait_ready
from bench.load.plain_vllm import free_port
from server.cli.main import ENGINE_DEAD_EXIT

READY_TIMEOUT_S = 300


def engine_core_of(server: subprocess.Popen) -> psutil.Process:
    for child in psutil.Process(server.pid).children(recursive=True):
        title = " ".join(child.cmdline()) or child.name()
        if "EngineCore" in title or child.name().startswith("VLLM::Engine"):
            return child
    raise AssertionError("no engine core process under the server")


def test_a_dead_engine_is_noticed_within_a_quarter_second():
    """The watchdog itself, on its own loop: it checks every ENGINE_CHECK_S (0.25 s), so a
    core that dies just after a check is noticed at the next; a slower watchdog (a check
    every second or more) misses the 0.75 s bound whenever the core dies, not by chance."""
    from server.app import _watch_engine

    class State:
        died_at = float("inf")

        @property
        def engine_dead(self) -> bool:
            return time.monotonic() >= self.died_at

    async def watch() -> tuple[float, int]:
        state, called = State(), []
        watchdog = asyncio.create_task(
            _watch_engine(state, lambda: called.append(time.monotonic())))
        await asyncio.sleep(0.05)  # the watchdog has checked once, and sleeps
        state.died_at = time.monotonic()
        await asyncio.wait_for(watchdog, timeout=30)
        return called[0] - state.died_at, len(called)

    noticed_after, calls = asyncio.run(watch())
    assert calls == 1
    assert noticed_after < 0.75, noticed_after


# docs/serving/running.md's figures: the server notices a dead core within 0.25 s and
# exits 2 s later.
# The bounds leave room for a loaded 2-core machine (the server, its engine and this test
# share the cores) and still fail when a step is gone: noticing takes under 1 s (4x the
# watch interval; the watchdog's own interval is held to 0.25 s by the test above), the
# drain keeps /readyz at 503 for at least 1.5 s of its 2 s, and `serve` is done (uvicorn
# stopped, the port closed, its last line printed) within 10 s of the kill. The process
# itself ends after Python's finalization of vLLM and torch, which took 2 to 7 s more
# here, depending on the load: its bound is only that it ends, with 3.
NOTICE_BOUND_S = 1.0
DRAIN_FLOOR_S = 1.5
SERVE_DONE_BOUND_S = 10.0
PROCESS_EXIT_BOUND_S = 30.0
# The process is gone right after its last line (os._exit): a normal interpreter exit spent
# 3-7 s more finalising torch and vLLM while the supervisor waited.
PROCESS_EXIT_AFTER_LINE_S = 1.5
NOTICED_LINE = "the engine core process stopped: answering 503 and exiting"
EXIT_LINE = "exiting with 3 so a supervisor restarts the server"


def test_a_killed_engine_core_is_noticed_within_a_quarter_second_and_serve_stops_2_s_later(
        serve_home: Path):
    home = serve_home
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    server = subprocess.Popen(
        [sys.executable, "-m", "server.cli", "serve", "--profile", "tiny", "--port", str(port)],
        env={**os.environ, "TANDEM_HOME": str(home)}, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True)
    lines: list[tuple[float, str]] = []  # (when this test read it, the line)
    exited: list[float] = []

    def read_output() -> None:
        for line in server.stdout:
            lines.append((time.monotonic(), line))

    def stamp_exit() -> None:
        server.wait()
        exited.append(time.monotonic())

    streaming = threading.Event()
    events: list[str] = []  # the stream's data lines

    def stream_a_long_answer() -> None:  # busy when the core dies, as an OOM kill finds it
        body = {"model": "tiny", "stream": True, "script": " ".join(["word"] * 3000),
                "messages": [{"role": "user", "content": "hello"}]}
        try:
            with httpx.Client(base_url=base, timeout=60) as client, client.stream(
                    "POST", "/v1/chat/completions", json=body) as stream:
                for line in stream.iter_lines():
                    if line.startswith("data:"):
                        events.append(line)
                        streaming.set()
        except httpx.TransportError:
            pass

    threads = [threading.Thread(target=f, daemon=True) for f in (read_output, stamp_exit)]
    for thread in threads:
        thread.start()
    def still_serving() -> None:
        assert not exited, "".join(t for _, t in lines)

    try:
        wait_ready(base, READY_TIMEOUT_S, still_serving)
        streamer = threading.Thread(target=stream_a_long_answer, daemon=True)
        streamer.start()
        assert streaming.wait(timeout=120)
        core = engine_core_of(server)
        killed = time.monotonic()
        core.kill()  # SIGKILL, as the kernel's OOM killer sends
        answers: list[tuple[float, float, int]] = []  # (sent, answered, status) of /readyz
        dead_answers: list[httpx.Response] = []  # /readyz and a chat, once it is dead
        while not exited and time.monotonic() < killed + PROCESS_EXIT_BOUND_S + 30:
            sent = time.monotonic()
            try:
                ready = httpx.get(f"{base}/readyz", timeout=2)
                answers.append((sent, time.monotonic(), ready.status_code))
                if ready.status_code == 503 and not dead_answers:
                    dead_answers += [ready, httpx.post(
                        f"{base}/v1/chat/completions", timeout=10, json={
                            "model": "tiny", "messages": [{"role": "user", "content": "hi"}]})]
            except httpx.TransportError:
                pass  # the port closed: the server is on its way out
            time.sleep(0.02)
        assert server.wait(timeout=60) == ENGINE_DEAD_EXIT
        for thread in (*threads, streamer):
            thread.join(timeout=10)
        statuses = [status for _, _, status in answers]
        assert 503 in statuses, statuses
        at = statuses.index(503)
        assert set(statuses[at:]) == {503}, statuses  # 503 from then on, until the port closed
        first_503, last_503 = answers[at][1], answers[-1][0]
        noticed = next(t for t, line in lines if NOTICED_LINE in line)
        serve_done = next(t for t, line in lines if EXIT_LINE in line)
        timings = {name: round(t - killed, 3) for name, t in (
            ("first 503", first_503), ("noticed", noticed), ("last 503", last_503),
            ("serve done", serve_done), ("process exit", exited[0]))}
        assert first_503 - killed < NOTICE_BOUND_S, timings
        assert noticed - killed < NOTICE_BOUND_S, timings
        assert last_503 - first_503 >= DRAIN_FLOOR_S, timings  # 503s, not a closed port
        assert serve_done - noticed >= DRAIN_FLOOR_S, timings
        assert serve_done - killed < SERVE_DONE_BOUND_S, timings
        assert exited[0] - serve_done < PROCESS_EXIT_AFTER_LINE_S, timings
        print(timings)

        # what a client and a health check are told
        error = json.loads(next(e for e in events if '"error"' in e)[5:])
        assert error["error"]["code"] == "engine_dead" and events[-1] == "data: [DONE]"
        ready, chat = dead_answers
        assert ready.json()["status"] == "engine_dead"
        assert chat.status_code == 503 and chat.json()["error"]["code"] == "engine_dead"
        output = "".join(text for _, text in lines)
        # The progress lines docs/serving.md promises, while it loaded:
        assert "[tandem] loading engine: profile tiny, model builtin:tiny-qwen3" in output
        assert "[tandem] warming up the engine" in output
        assert re.search(rf"\[tandem\] ready in \d+ s: http://127\.0\.0\.1:{port}/v1 "
                         r"\(profile tiny, memory on\)", output), output[-2000:]
        # vLLM logs the death once, with its traceback; the server adds none, request or not.
        tracebacks = [line for line in output.splitlines() if "Traceback" in line]
        assert len(tracebacks) <= 1 and all("async_llm.py" in t for t in tracebacks)
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()


# vLLM refuses the profile before its engine core starts; the bound is the imports and the
# tokenizer's load on a busy 2-core machine, far short of a supervisor's patience.
LOAD_FAILURE_BOUND_S = 180


def test_a_model_that_cannot_load_makes_serve_exit_non_zero_with_the_reason(
        tmp_path: Path, serve_home: Path):
    """A profile whose max_model_len is past the model's positions (8,192 on tiny): the
    engine cannot load, and `tandem serve` exits with ENGINE_LOAD_FAILED_EXIT and the
    reason on stderr, rather than answering /readyz 503 for ever (which a supervisor
    never restarts, and a user never reads)."""
    from server.cli.serve import ENGINE_LOAD_FAILED_EXIT

    home = serve_home
    tiny = (Path(__file__).resolve().parents[1] / "profiles" / "tiny.yaml").read_text()
    assert "max_model_len: 4096\n" in tiny
    profile = tmp_path / "too-long.yaml"
    profile.write_text(tiny.replace("max_model_len: 4096\n", "max_model_len: 100000\n"))
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "server.cli", "serve", "--profile", str(profile), "--port",
         str(free_port())], env={**os.environ, "TANDEM_HOME": str(home)},
        capture_output=True, text=True, timeout=LOAD_FAILURE_BOUND_S, check=False)
    took = time.monotonic() - started
    assert done.returncode == ENGINE_LOAD_FAILED_EXIT, (done.stdout[-2000:],
                                                        done.stderr[-2000:])
    reason = next(line for line in done.stderr.splitlines()
                  if line.startswith("tandem: the engine failed to load: "))
    assert "max_model_len (100000) is greater than" in reason, reason
    assert "exiting with 4: the engine failed to load" in done.stderr
    assert "Traceback" not in done.stderr + done.stdout
    print(f"exited {took:.1f} s after the start")
