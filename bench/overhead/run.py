"""The server's own work under load: `tandem bench --overhead [--quick]`.

Issue 58, item 4. 1,000 users with 100 ledger records each (25 sessions of 4 turns) and
the bench's 50 notes each; 32 clients at once, each holding conversations of users of its
own (client i takes users i, i + 32, ...), each conversation a new session then turns
replayed from the ledger: the hiding decision, the ledger's find, rendering and the
tokenizer on every request, as a coding agent's client sends them.

The engine answers at once (`instant.py`): what is measured is the server's share of TTFT,
from the client sending the request to the engine's `generate` being called (the lanes
bench's "of which server" column), p50 and p95, with memory on and, for the same requests,
memory off. The stall watcher (`stalls.py`) runs through both, and through as long a spell
with the loop idle: the machine's own noise floor, against which the 1 ms bound is read.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import random
import shutil
import statistics
import tempfile
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx

from bench.lanes.conversation import BASE_SYSTEM, TURNS, fill_store
from bench.lanes.lane import PREFETCH_OFF, parse_stream
from bench.overhead.instant import ANSWER, InstantEngine
from bench.overhead.stalls import StallWatcher
from bench.paths import RESULTS_DIR
from bench.report import environment, fmt, write_run
from conductor.ledger.id_blocks import BLOCK_SIZE
from conductor.ledger.records import Record, VisibleMessage
from conductor.memory.settings import MemorySettings
from engine.profiles import Profile
from server.app import create_app, freeze_loaded_heap
from server.turn.memory import SESSION_HEADER, USER_HEADER

RESULTS = RESULTS_DIR / "overhead"
GOAL_P95_MS = 5.0
PEER = "127.0.0.1"  # httpx's ASGI transport's client address: a trusted proxy here
# A synthetic record's ids: the system prompt's block, shared by every record (a coding
# agent's system prompt is thousands of tokens, the same in each session: the ledger, like
# vLLM's prefix cache, holds it once), then TURN_IDS ids a turn of the record's own. Sized
# so that all 100,000 records are held: 25,000 sessions x (8 + 16 + 24 + 32) own ids is
# 2M of the ledger's 4M bound (at 32 ids a turn and no shared block, 28,776 were held).
TURN_IDS = 8


@dataclass(frozen=True)
class OverheadConfig:
    users: int = 1000
    sessions_per_user: int = 25
    turns_per_session: int = 4  # 25 x 4: 100 records a user
    clients: int = 32
    conversations: int = 3  # a client's, one after the other
    turns: int = 4  # a live conversation's
    # An answer's time on the engine (uniform between the two): 16 tokens at a GPU's
    # pace for 32 streams. It spaces each client's requests; with none, 32 clients would
    # send back to back and measure the queue, not the work.
    answer_s: tuple[float, float] = (0.5, 1.5)


QUICK = OverheadConfig(users=100, clients=8, conversations=1, turns=3, answer_s=(0.2, 0.6))
FULL = OverheadConfig()


def say(message: str) -> None:
    print(f"[overhead bench] {message}", flush=True)


def user_name(n: int) -> str:
    return f"agent{n:04d}"


def _app(profile: Profile, engine: InstantEngine, home: Path, mode: str):
    memory = dataclasses.replace(profile.memory, mode=mode, writer_mode="off",
                                 prefetch=PREFETCH_OFF)
    return create_app(dataclasses.replace(profile, memory=memory), home, engine=engine,
                      memory_settings=MemorySettings(user_name=user_name(0),
                                                     trusted_proxies=frozenset({PEER})))


def populate(app, engine: InstantEngine, config: OverheadConfig) -> dict[str, Any]:
    """Every user's notes (one store filled, its files copied) and ledger records."""
    services = app.state.tandem.memory
    started = time.perf_counter()
    first = services.store(user_name(0))
    fill_store(first)
    root = services.root
    for part in ("notes", "index"):
        source = root / part / user_name(0)
        for n in range(1, config.users):
            if source.exists():
                shutil.copytree(source, root / part / user_name(n))
    notes_s = time.perf_counter() - started
    started = time.perf_counter()
    for n in range(config.users):  # a long-running server has each user's store open,
        store = services.store(user_name(n))  # and its search index built
        store.list(include_stale=False)
        store.search("database tests", limit=1, include_stale=False)
    stores_s = time.perf_counter() - started
    started = time.perf_counter()
    rng = random.Random(58)
    system = engine.tokenizer.encode(BASE_SYSTEM, add_special_tokens=False)
    head = (system * (BLOCK_SIZE // len(system) + 1))[:BLOCK_SIZE]  # one shared block
    vocab = len(engine.tokenizer)
    for n in range(config.users):
        user = user_name(n)
        for s in range(config.sessions_per_user):
            messages = [VisibleMessage.of("system", BASE_SYSTEM)]
            ids = list(head)
            for t in range(config.turns_per_session):
                turn = TURNS[t % len(TURNS)]
                messages += [VisibleMessage.of("user", f"{turn.user} ({user} {s})"),
                             VisibleMessage.of("assistant", ANSWER)]
                ids += [rng.randrange(vocab) for _ in range(TURN_IDS)]
                services._ledger.record(Record(user, f"old-{s}", tuple(messages), list(ids),
                                              ended_cleanly=True,
                                              fingerprint=engine.fingerprint))
    return {"notes_s": round(notes_s, 1), "stores_s": round(stores_s, 1),
            "ledger_s": round(time.perf_counter() - started, 1),
            "ledger_records": len(services._ledger), "ledger_ids": services._ledger.tokens,
            "notes_per_user": len(first.list(include_stale=False))}


async def _conversation(client: httpx.AsyncClient, engine: InstantEngine, model: str,
                        user: str, session: str, turns: int, out: list[float]) -> None:
    history: list[dict] = [{"role": "system", "content": BASE_SYSTEM}]
    for turn in TURNS[:turns]:
        history.append({"role": "user", "content": turn.user})
        body = {"model": model, "messages": history, "stream": True, "max_tokens": 16,
                "stream_options": {"include_usage": True}}
        sent = time.perf_counter()
        response = await client.post("/v1/chat/completions", json=body,
                                     headers={USER_HEADER: user, SESSION_HEADER: session})
        if response.status_code != 200:
            raise RuntimeError(f"HTTP {response.status_code}: {response.text}")
        content, _usage, completion_id = parse_stream(response.text)
        out.append(engine.called_at[completion_id] - sent)
        history.append({"role": "assistant", "content": content})


async def _drive(app, engine: InstantEngine, model: str, config: OverheadConfig,
                 round_: int, tag: str) -> list[float]:
    """One round: every client holds one conversation at once; the server's share of
    each request's TTFT, in seconds."""
    shares: list[float] = []
    transport = httpx.ASGITransport(app=app, client=(PEER, 40000))
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost",
                                 timeout=None) as client:
        await asyncio.gather(*(
            _conversation(client, engine, model,
                          user_name((i + config.clients * round_) % config.users),
                          f"live-{tag}-{round_}-{i}", config.turns, shares)
            for i in range(config.clients)))
    return shares


def _quantiles(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    if not ordered:
        return {"n": 0}
    at = lambda q: ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000  # noqa: E731
    return {"n": len(ordered), "p50_ms": at(0.50), "p95_ms": at(0.95), "max_ms": ordered[-1]
            * 1000, "mean_ms": statistics.fmean(ordered) * 1000}


async def measure(profile: Profile, model_path: str, config: OverheadConfig,
                  tokenizer=None) -> dict[str, Any]:
    """Every figure of the overhead bench (on the caller's event loop)."""
    engine = InstantEngine(profile, model_path, tokenizer, config.answer_s)
    with tempfile.TemporaryDirectory(prefix="tandem-overhead-") as tmp:
        on = _app(profile, engine, Path(tmp) / "on", "on")
        off = _app(profile, engine, Path(tmp) / "off", "off")
        say(f"{config.users} users: notes, stores and {config.sessions_per_user} x "
            f"{config.turns_per_session} ledger records each")
        population = await asyncio.to_thread(populate, on, engine, config)
        # what a loaded server does before serving (server/app.py): its heap out of the
        # collector's walk (the harness's ASGI transport runs no lifespan)
        population["frozen_objects"] = freeze_loaded_heap()
        say(f"populated: {population}")
        await _drive(on, engine, profile.name, dataclasses.replace(config, clients=2), 99,
                     "warm")  # first-run costs (the template's compile) out of the figures
        await _drive(off, engine, profile.name, dataclasses.replace(config, clients=2), 99,
                     "warm")
        shares: dict[str, list[float]] = {"on": [], "off": []}
        stalls: dict[str, StallWatcher] = {}
        spent: dict[str, float] = {"on": 0.0, "off": 0.0}
        for round_ in range(config.conversations):  # off and on take turns: drift cancels
            for mode in ("on", "off") if round_ % 2 == 0 else ("off", "on"):
                app = on if mode == "on" else off
                watcher = stalls.setdefault(mode, StallWatcher())
                started = time.perf_counter()
                async with watcher:
                    shares[mode] += await _drive(app, engine, profile.name, config, round_,
                                                 mode)
                spent[mode] += time.perf_counter() - started
                say(f"round {round_ + 1}/{config.conversations} memory {mode}: "
                    f"p95 {_quantiles(shares[mode])['p95_ms']:.1f} ms so far")
        idle = StallWatcher()
        async with idle:  # the noise floor: the loop with nothing to do
            await asyncio.sleep(min(spent["on"], 10.0))
    return {"config": dataclasses.asdict(config), "population": population,
            "server_share": {mode: _quantiles(v) for mode, v in shares.items()},
            "stalls": {**{mode: w.summary() for mode, w in stalls.items()},
                       "idle": idle.summary()},
            "seconds": {k: round(v, 1) for k, v in spent.items()},
            "goal_p95_ms": GOAL_P95_MS}


def judged(results: dict[str, Any]) -> dict[str, Any]:
    """`results` with its verdicts: the p95 goal and the stall bound, each met or not."""
    p95 = results["server_share"]["on"]["p95_ms"] < results["goal_p95_ms"]
    stalls = _stalls_met(results["stalls"])
    return {**results, "p95_met": p95, "stalls_met": stalls, "met": p95 and stalls}


def summary_lines(r: dict[str, Any]) -> list[str]:
    """The overhead part's rows and notes, for this bench's summary and the lanes'."""
    c, on = r["config"], r["server_share"]["on"]
    s = r["stalls"]
    lines = [
        f"Server's own work under load: {c['users']:,} users x "
        f"{c['sessions_per_user'] * c['turns_per_session']} ledger records "
        f"({r['population']['ledger_records']:,} held) and {r['population']['notes_per_user']}"
        f" notes each, {c['clients']} clients at once, {on['n']} requests a mode; the engine "
        "answers at once (bench/overhead).", "",
        *_load_line(r.get("load_average")),
        "| memory | requests | server share p50 ms | p95 ms | max ms | loop stalls > 1 ms "
        "| worst stall ms |", "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for mode in ("off", "on", "idle"):
        q = r["server_share"].get(mode, {})
        w = s[mode]
        lines.append(f"| {mode} | {q.get('n', '-')} | {fmt(q.get('p50_ms'), 2)} | "
                     f"{fmt(q.get('p95_ms'), 2)} | {fmt(q.get('max_ms'), 1)} | "
                     f"{w['stalls_over_bound']} of {w['beats']} | {fmt(w['max_ms'], 1)} |")
    lines += ["", "| target | measured | goal | met |", "| --- | ---: | --- | --- |",
              f"| server share of TTFT under load, p95 (memory on) | {on['p95_ms']:.2f} ms | "
              f"< {r['goal_p95_ms']:g} ms | {'yes' if r['p95_met'] else '**no**'} |",
              f"| server share of TTFT under load, p50 (memory on, reported) | "
              f"{on['p50_ms']:.2f} ms | - | - |",
              f"| loop stalls past 1 ms, memory on (idle loop: {s['idle']['stalls_over_bound']}"
              f" of {s['idle']['beats']}) | {s['on']['stalls_over_bound']} of "
              f"{s['on']['beats']} | 0 beyond the idle loop's | "
              f"{'yes' if r['stalls_met'] else '**no**'} |", ""]
    lines += [f"Garbage collections while measured, memory {mode} (generation: runs, ms in all, "
              f"longest ms): " + "; ".join(
                  f"{gen}: {c['n']}, {c['total_ms']:.0f}, {c['max_ms']:.1f}"
                  for gen, c in s[mode].get("collections", {}).items()) + "."
              for mode in ("off", "on")]
    lines.append(f"Objects frozen out of the collector's walk after the load: "
                 f"{r['population'].get('frozen_objects', 0):,}.")
    lines.append("")
    if s["on"]["where"]:
        lines += ["Where the loop's stalls were spent, memory on (samples of our innermost "
                  "frame while a beat was overdue):", ""]
        lines += [f"- {w['frame']}: {w['samples']}" for w in s["on"]["where"]]
        lines.append("")
    return lines


def _load_line(load: Any) -> list[str]:
    """The 1-minute load average at the run's start and end (a shared 2-core machine)."""
    if not isinstance(load, dict):
        return []
    return [f"Load average (1 min) at the start {load['start'][0]:.1f}, at the end "
            f"{load['end'][0]:.1f}, on {os.cpu_count()} cores.", ""]


def _stalls_met(s: dict[str, Any]) -> bool:
    """Stalls past the bound no more often than the idle loop's own (the machine's noise:
    other processes on these cores), with the same number of beats' chance."""
    on, idle = s["on"], s["idle"]
    return on["stall_share"] <= max(idle["stall_share"] * 1.5, 0.001)


def run_overhead_bench(profile: Profile, out_dir: Path | None = None,
                       quick: bool = False) -> dict[str, Any]:
    from engine.engine import resolve_model_path
    from engine.home import tandem_home

    model_path = resolve_model_path(profile, tandem_home(), say)
    config = QUICK if quick else FULL
    load_at_start = os.getloadavg()  # a shared machine's load: the figures' context
    started_at = datetime.now().isoformat(timespec="seconds")  # the lanes' summary cites it
    results = judged(asyncio.run(measure(profile, model_path, config)))
    results["started_at"] = started_at
    results["environment"] = environment(profile, model_path)
    results["load_average"] = {"start": load_at_start, "end": os.getloadavg()}
    out = out_dir or RESULTS / (f"{profile.name}-quick" if quick else profile.name)
    text = "\n".join([f"# The server's own work under load ({profile.name})", "",
                      *summary_lines(results)])
    say(write_run(out, results, text, lambda folder: _plot(results, folder)))
    return results


def _plot(r: dict[str, Any], folder: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    modes = ("off", "on")
    fig, ax = plt.subplots(figsize=(6, 4), dpi=100)
    for i, q in enumerate(("p50_ms", "p95_ms")):
        ax.bar([m + i * 0.4 for m in range(len(modes))],
               [r["server_share"][m][q] for m in modes], width=0.4, label=q[:3])
    ax.axhline(r["goal_p95_ms"], color="grey", linestyle="--", label="p95 goal")
    ax.set_xticks([m + 0.2 for m in range(len(modes))], [f"memory {m}" for m in modes])
    ax.set_ylabel("server share of TTFT, ms")
    ax.set_title(f"{r['config']['clients']} clients, {r['config']['users']} users")
    ax.legend()
    fig.tight_layout()
    fig.savefig(folder / "server_share.png")
    plt.close(fig)
