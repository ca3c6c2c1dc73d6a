"""The hybrid cache checks on a CUDA GPU with a real Qwen3.5 checkpoint, for whoever has one:

    python -m bench.hybrid.gpu_check [--profile qwen35-4b] [--out DIR]

It serves the profile through Tandem (prefix caching in align mode, the block size vLLM
sets) and measures, from each answer's `usage.prompt_tokens_details.cached_tokens`:

* a repeated prompt: the cached tokens against the block floor (whole blocks but the last
  token's: vLLM keeps one recurrent state, at the prompt's last block boundary);
* a conversation with memory on: each later turn's cached fraction (the ledger replays the
  earlier turns' exact ids, so all but the tail past the last block boundary should hit);
* a second session of the same user: how much of its head (system prompt and memory's
  shared context) is cached, which on these models needs the head to pass a block boundary.

Without a GPU or without the checkpoint (in the Hugging Face cache, or the profile's model
a local folder) it says so and exits 0: the tests never need it (tests/test_hybrid.py runs
the same checks on the tiny hybrid model on the CPU). Writes summary.json under --out.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import httpx

from bench.paths import RESULTS_DIR

FILLER = ("The harbour office logs every ship that enters: its name, its cargo, its crew "
          "and the berth it is given. ")


def checkpoint_present(model: str) -> bool:
    """The model's weights are on this machine: a local folder, or the hub cache."""
    if Path(model, "config.json").is_file():
        return True
    try:
        from huggingface_hub import try_to_load_from_cache

        return isinstance(try_to_load_from_cache(model, "config.json"), str)
    except ImportError:
        return False


def usage_of(response: httpx.Response) -> dict:
    response.raise_for_status()
    usage = response.json()["usage"]
    return {"prompt": usage["prompt_tokens"],
            "cached": usage["prompt_tokens_details"]["cached_tokens"]}


def measure(base: str, model: str, block: int, turns: int = 6) -> dict:
    """The three checks against a served Tandem; every figure as the usage reports it."""
    client = httpx.Client(base_url=base, timeout=600)
    body = {"model": model, "max_tokens": 64, "temperature": 0}
    long = FILLER * 60
    repeat = [usage_of(client.post("/v1/chat/completions", headers={"X-Tandem-Memory": "off"},
                                   json={**body, "messages": [{"role": "user",
                                                               "content": long}]}))
              for _ in range(2)]
    floor = (repeat[1]["prompt"] - 1) // block * block
    session = {"X-Tandem-Session": f"hybrid-gpu-{time.time_ns()}"}
    messages = [{"role": "system", "content": "You are a careful assistant. " + long},
                {"role": "user", "content": "Name three things the office logs."}]
    later = []
    for turn in range(turns):
        response = client.post("/v1/chat/completions", headers=session,
                               json={**body, "messages": messages})
        figures = usage_of(response)
        if turn:
            later.append(figures)
        answer = response.json()["choices"][0]["message"]["content"] or ""
        messages += [{"role": "assistant", "content": answer},
                     {"role": "user", "content": f"And the {turn + 2}th thing, in one line?"}]
    fresh = usage_of(client.post("/v1/chat/completions", headers={
        "X-Tandem-Session": f"hybrid-gpu-new-{time.time_ns()}"}, json={
        **body, "messages": messages[:2]}))
    cached = sum(t["cached"] for t in later)
    prompt = sum(t["prompt"] for t in later)
    return {"block_size": block, "repeat": repeat, "repeat_block_floor": floor,
            "repeat_hit_is_floor": repeat[1]["cached"] == floor, "later_turns": later,
            "later_turn_cached_fraction": round(cached / prompt, 4) if prompt else None,
            "new_session": fresh}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.hybrid.gpu_check")
    parser.add_argument("--profile", default="qwen35-4b")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    from engine.home import tandem_home
    from engine.profiles import gpu_available, load_profile

    profile = load_profile(args.profile)
    if not gpu_available():
        print("hybrid gpu check: no CUDA GPU here; nothing run (tests/test_hybrid.py covers "
              "the CPU path)")
        return 0
    if not checkpoint_present(profile.model):
        print(f"hybrid gpu check: {profile.model} is not on this machine (hub cache or "
              "folder); nothing run")
        return 0
    from bench.load.app_thread import ServedApp
    from server.app import create_app

    with ServedApp(create_app(profile, tandem_home())) as server:
        engine = server.app.state.tandem.engine
        block = engine._llm.vllm_config.cache_config.block_size
        results = {"profile": profile.name, "model": profile.model,
                   "profile_block_size": profile.block_size,
                   **measure(server.base_url, profile.name, block)}
    out = args.out or RESULTS_DIR / f"hybrid-{profile.name}-{time.strftime('%Y%m%d-%H%M%S')}"
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.json").write_text(json.dumps(results, indent=2))
    print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
