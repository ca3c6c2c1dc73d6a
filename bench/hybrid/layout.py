"""The boundary-aware layout on the tiny hybrid model, with it and without it:

    python -m bench.hybrid.layout [--out DIR]

One engine (`tiny-hybrid`, vLLM's CPU path, prefix caching in align mode, 640-token
blocks) serves both runs; "without" sets the engine's `reuse_block` to None, which is
the layout every dense profile gets and what a user of plain vLLM gets on these models
(the shared context ends where its text ends). Each run has its own system prompt, so
neither reads the other's cache. Per run, from each answer's
`usage.prompt_tokens_details.cached_tokens`:

* new sessions: the first turns of four sessions of the same user, the prewarm's idle
  tick run after each (as the idle loop would), against where the shared context ends;
* later turns: three sessions' turns 2 to 4 (their first messages 500, 650 and 800 words,
  so their ends fall at different places in a block), their cached fraction (the ledger
  replays the earlier turns' exact ids; vLLM reads them up to the last block boundary of
  the turn before, where it kept the recurrent state);
* the padding: how many filler tokens the layout put in the shared context.

Writes results.json and summary.md (default: bench/results/hybrid-layout/).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

import httpx

from bench.paths import RESULTS_DIR

OUT = RESULTS_DIR / "hybrid-layout"
LATER_WORDS = (500, 650, 800)
QUESTIONS = ("Which port does the API use?", "And the database?", "Anything else listening?",
             "Who owns the queue?")


def _usage(response: httpx.Response) -> dict:
    response.raise_for_status()
    usage = response.json()["usage"]
    return {"prompt": usage["prompt_tokens"],
            "cached": usage["prompt_tokens_details"]["cached_tokens"]}


def _chat(server, session: str, messages: list[dict]) -> httpx.Response:
    return httpx.post(f"{server.base_url}/v1/chat/completions",
                      headers={"X-Tandem-Session": session},
                      json={"model": "tiny-hybrid", "max_tokens": 4, "temperature": 0,
                            "messages": messages}, timeout=600)


def _conversation(server, session: str, system: dict, words: int, turns: int = 4) -> list[dict]:
    """One session's turns (its first message `words` words long), each turn's usage."""
    messages = [system, {"role": "user", "content": " ".join(f"w{i}" for i in range(words))}]
    figures = []
    for turn in range(turns):
        response = _chat(server, session, messages)
        figures.append(_usage(response))
        answer = response.json()["choices"][0]["message"]["content"] or ""
        messages += [{"role": "assistant", "content": answer},
                     {"role": "user", "content": f"And point {turn + 2}?"}]
    return figures


def run(server, mode: str) -> dict:
    """One run's figures: `mode` names its sessions and its system prompt."""
    tandem = server.app.state.tandem
    user = tandem.memory.settings.user_name
    system = {"role": "system", "content": f"You help with the service ({mode})."}
    sessions = []
    for n, question in enumerate(QUESTIONS):
        session = f"{mode}-new-{n}"
        figures = _usage(_chat(server, session, [system, {"role": "user", "content": question}]))
        (shared,) = [s for s in tandem.memory.latest_record(user, session).spans
                     if s.kind == "shared"]
        sessions.append({**figures, "shared_start": shared.start, "shared_end": shared.end})
        server.run(tandem.prewarm.tick())
    later, conversations = [], []
    for words in LATER_WORDS:  # several lengths: where a prompt's end falls in its block
        turns = _conversation(server, f"{mode}-later-{words}", system, words)[1:]
        conversations.append(turns)
        later += turns
    return {"new_sessions": sessions, "later_turns": conversations,
            "later_turn_cached_fraction": round(sum(t["cached"] for t in later)
                                                / sum(t["prompt"] for t in later), 4),
            "new_session_shared_cached": [min(s["cached"], s["shared_end"]) / s["shared_end"]
                                          for s in sessions]}


def summary(results: dict) -> str:
    on, off = results["with_layout"], results["without_layout"]
    rows = [f"| new session {n + 1}: cached / shared context end | "
            f"{a['cached']} / {a['shared_end']} | {b['cached']} / {b['shared_end']} |"
            for n, (a, b) in enumerate(zip(on["new_sessions"], off["new_sessions"],
                                           strict=True))]
    return "\n".join([
        "# The boundary-aware layout on tiny-hybrid (issue 56)",
        "",
        f"vLLM's block size on this model: {results['block_size']} tokens. "
        "Measured by `python -m bench.hybrid.layout` on the CPU (random weights: the "
        "figures are the cache's, not the answers'). Load average "
        f"{results['load_average_start'][0]:.2f} at the start, "
        f"{results['load_average_end'][0]:.2f} at the end.",
        "",
        "| | with the layout | without (plain vLLM's) |",
        "| --- | --- | --- |",
        *rows,
        "| later turns' cached fraction (turns 2-4, 3 sessions) | "
        f"{on['later_turn_cached_fraction']} | {off['later_turn_cached_fraction']} |",
        f"| padding tokens in the shared context | {results['padding_tokens']} | 0 |",
        "",
        "Without the layout, vLLM keeps one recurrent state per prompt, at its last block "
        "boundary, inside the session's own tokens: the second new session reads nothing "
        "and later ones only the shared prefix's block floor (vLLM's shared-prefix "
        "junction). With it, the shared context ends on a boundary and the prewarm "
        "(one token past it) keeps the state there, so every later new session reads the "
        "whole head and shared context. Later turns replay the ledger's exact ids either "
        "way: what they miss is the previous prompt's tail past its last block boundary (up to "
        f"{results['block_size'] - 1} tokens a turn), wherever the layout puts the shared "
        "context, so their fraction depends on where each prompt ends in its block, not on "
        "this layout.",
        "",
    ])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.hybrid.layout")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    from bench.load.app_thread import ServedApp
    from engine.home import tandem_home
    from engine.model_builder import ensure_model, models_dir
    from engine.profiles import load_profile
    from server.app import create_app

    ensure_model(tandem_home(), "tiny-hybrid", progress=lambda _m: None)
    load_start = os.getloadavg()
    with tempfile.TemporaryDirectory() as folder:
        home = Path(folder)
        (home / "models").symlink_to(models_dir(tandem_home()), target_is_directory=True)
        with ServedApp(create_app(load_profile("tiny-hybrid"), home)) as server:
            engine = server.app.state.tandem.engine
            block = engine.reuse_block
            with_layout = run(server, "aligned")
            engine.reuse_block = None  # the layout of a dense profile, and of plain vLLM
            without = run(server, "plain")
            engine.reuse_block = block
    on_span = with_layout["new_sessions"][0]
    off_span = without["new_sessions"][0]
    padding = (on_span["shared_end"] - on_span["shared_start"]) - (
        off_span["shared_end"] - off_span["shared_start"])
    results = {"profile": "tiny-hybrid", "block_size": block, "padding_tokens": padding,
               "with_layout": with_layout, "without_layout": without,
               "load_average_start": load_start, "load_average_end": os.getloadavg()}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    (args.out / "summary.md").write_text(summary(results))
    print(summary(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
