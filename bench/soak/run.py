"""`tandem bench --soak`: `tandem serve` with memory, the writer and the cognition jobs on,
the soak's clients for a fixed time (bench/soak/drive.py), then the server stopped and its
memory folder checked; results.json, summary.md and a plot of every request's time to
first token over the run, under bench/results/soak/<profile>/."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import tempfile
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

from bench.load.app_thread import wait_ready
from bench.load.plain_vllm import free_port
from bench.paths import RESULTS_DIR
from bench.report import write_run
from bench.soak.drive import (
    SoakPlan,
    afterwards_json,
    check_memory,
    figures,
    passed,
    run_clients,
    wait_idle,
)
from engine.home import tandem_home
from engine.model_builder import models_dir
from engine.profiles import Profile

RESULTS = RESULTS_DIR / "soak"
READY_TIMEOUT_S = 900
WRITER_IDLE_S = "3"  # sessions go idle fast, so the writer runs during the soak
PLOT = "soak.png"
IDLE_WAIT_S = 180  # the background backlog a soak leaves may outlast it: see `Afterwards`


def say(message: str) -> None:
    print(f"[soak] {message}", file=sys.stderr, flush=True)


def soak_profile(profile: Profile, folder: Path) -> Path:
    """The profile with memory on, the writer on and the jobs on its own schedule."""
    raw = yaml.safe_load(profile.path.read_text()) if profile.path else {}
    memory = raw.setdefault("memory", {})
    memory["mode"] = "on"
    memory["writer"] = {**(memory.get("writer") or {}), "mode": "on"}
    memory["jobs"] = {**(memory.get("jobs") or {}), "mode": "on"}
    path = folder / f"{profile.name}-soak.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def _wait_ready(process: subprocess.Popen, base: str, log: Path) -> None:
    def still_serving() -> None:
        if process.poll() is not None:
            raise RuntimeError(f"tandem serve exited: {log.read_text()[-2000:]}")

    wait_ready(base, READY_TIMEOUT_S, still_serving)


def run_soak_bench(profile: Profile, plan: SoakPlan, out_dir: Path | None = None
                   ) -> dict[str, Any]:
    if not profile.scripted:
        raise SystemExit(f"the soak scripts its answers: profile {profile.name!r} is not "
                         "scripted (use tiny)")
    with tempfile.TemporaryDirectory(prefix="tandem-soak-") as tmp:
        home = Path(tmp)
        (home / "models").symlink_to(models_dir(tandem_home()), target_is_directory=True)
        port = free_port()
        base = f"http://127.0.0.1:{port}"
        log = home / "serve.log"
        command = [sys.executable, "-m", "server.cli", "serve", "--profile",
                   str(soak_profile(profile, home)), "--port", str(port)]
        env = {**os.environ, "TANDEM_HOME": str(home), "TANDEM_WRITER_IDLE_S": WRITER_IDLE_S}
        with log.open("w") as sink:
            process = subprocess.Popen(command, env=env, stdout=sink, stderr=subprocess.STDOUT)
            try:
                say(f"starting tandem serve ({profile.name}, writer and jobs on)")
                _wait_ready(process, base, log)
                say(f"{plan.clients} clients for {plan.duration_s:.0f} s")
                logs = asyncio.run(run_clients(base, None, plan))
                results = figures(logs, plan)
                say(f"{results['requests']} requests; waiting for the engine to be idle")
                results["afterwards"] = afterwards_json(asyncio.run(wait_idle(
                    base, IDLE_WAIT_S)))
            finally:
                process.terminate()
                try:
                    results_exit = process.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    process.kill()
                    results_exit = process.wait()
        server_log = log.read_text(errors="replace")
        results["server_exit_code"] = results_exit
        results["server_log_tracebacks"] = server_log.count("Traceback (most recent call last)")
        # the server's log holds no note text (its rule), so its tracebacks can be kept
        results["server_log_traceback_text"] = _tracebacks(server_log)
        results["memory"] = check_memory(home / "memory",
                                         [t for client in logs for t in client.remembered])
        results["passed"] = passed(results) and results["server_log_tracebacks"] == 0
        results["environment"] = {"profile": profile.name, "cpus": os.cpu_count(),
                                  "started": datetime.now().isoformat(timespec="seconds")}
    out = out_dir or RESULTS / profile.name
    print(write_report(results, out))
    say(f"written to {out}")
    return results


def _tracebacks(log: str, lines_after: int = 30) -> list[str]:
    lines = log.splitlines()
    return ["\n".join(lines[max(0, i - 3): i + lines_after])
            for i, line in enumerate(lines) if "Traceback (most recent call last)" in line]


def markdown(results: dict[str, Any]) -> str:
    plan, memory, after = results["plan"], results["memory"], results["afterwards"]
    rows = [
        ("clients, duration", f"{plan['clients']}, {plan['duration_s']:.0f} s"),
        ("requests (streams left mid-answer)",
         f"{results['requests']} ({results['streams_left_mid_answer']})"),
        ("by status", ", ".join(f"{k}: {v}" for k, v in results["by_status"].items())),
        ("other than 200: 5xx, failed connections",
         f"{results['other_than_200']}: {results['server_errors_5xx']}, "
         f"{results['connection_failures']}"),
        ("TTFT p50 / p99", f"{_s(results['ttft_p50_s'])} / {_s(results['ttft_p99_s'])}"),
        ("latency p50 / p99",
         f"{_s(results['latency_p50_s'])} / {_s(results['latency_p99_s'])}"),
        ("output tokens/s", f"{results['output_tokens_per_s']:.1f}"),
        ("notes acknowledged, lost",
         f"{memory['notes_acknowledged']}, {len(memory['notes_lost'])}"),
        ("note files unreadable", str(memory["note_files_unreadable"])),
        ("journal entries, torn lines",
         f"{memory['journal_entries']}, {memory['journal_torn_lines']}"),
        ("history turns, unreadable",
         f"{memory['history_turns']}, {memory['history_turns_unreadable']}"),
        ("engine requests started, by kind", ", ".join(
            f"{k}: {v}" for k, v in sorted(after["started_by_kind"].items()))),
        ("client requests in flight once the clients stopped", str(after["client_in_flight"])),
        ("engine idle after", _s(after["idle_after_s"]) if after["idle_after_s"] is not None
         else f"not within {IDLE_WAIT_S} s: {after['background_in_flight']} background "
              f"turn in flight, {after['background_started_during_wait']} started in the "
              "wait (a backlog, not a leak)" if not after["leaked"] else "LEAKED"),
    ]
    if "server_log_tracebacks" in results:
        rows.append(("tracebacks in the server log", str(results["server_log_tracebacks"])))
    lines = ["# Soak", "", f"passed: **{results['passed']}**", "", "| | |", "| --- | --- |",
             *[f"| {k} | {v} |" for k, v in rows], ""]
    return "\n".join(lines)


def _s(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f} s"


def plot(results: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4))
    points = results["timeline"]
    ok = [(at, t) for at, t, status in points if status == 200]
    bad = [(at, t) for at, t, status in points if status != 200]
    ax.scatter([p[0] for p in ok], [p[1] for p in ok], s=6, label="200")
    if bad:
        ax.scatter([p[0] for p in bad], [p[1] for p in bad], s=12, c="red", label="other")
    ax.set_xlabel("seconds into the soak")
    ax.set_ylabel("time to first token (streamed) or answer (s)")
    ax.set_title(f"Soak: {results['plan']['clients']} clients")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def write_report(results: dict[str, Any], out_dir: Path) -> str:
    return write_run(out_dir, results, markdown(results),
                     lambda folder: plot(results, folder / PLOT))
