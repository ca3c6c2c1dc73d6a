"""The shape of an API response (keys and value types, the first item of each list), to
compare Tandem's responses with plain vLLM's own server's."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

VLLM_SHAPES = Path(__file__).resolve().parent / "data" / "vllm_shapes.json"


def shape(value: Any, key: str = "") -> Any:
    if isinstance(value, dict):
        numbers = all(isinstance(v, int | float) for v in value.values())
        if key == "top_logprobs" and numbers:  # the completions API's {token: logprob}
            return {"<token>": shape(next(iter(value.values())))} if value else {}
        return {k: shape(v, k) for k, v in sorted(value.items())}
    if isinstance(value, list):
        return [shape(value[0], key)] if value else []
    if value is None:
        return "null"
    return {bool: "bool", int: "number", float: "number", str: "string"}[type(value)]


def differences(ours: Any, theirs: Any, where: str = "") -> list[str]:
    """Where two shapes differ. A null on either side matches anything, and a key vLLM
    sends as null may be missing here (its own extensions: kv_transfer_params, token_ids,
    ...); every key vLLM fills must be here with the same shape, and nothing else."""
    if "null" in (ours, theirs):
        return []
    if isinstance(ours, dict) and isinstance(theirs, dict):
        out = [f"{where}.{k}: only in vLLM's" for k in theirs.keys() - ours.keys()
               if theirs[k] != "null"]
        out += [f"{where}.{k}: only in ours" for k in ours.keys() - theirs.keys()]
        for key in ours.keys() & theirs.keys():
            out += differences(ours[key], theirs[key], f"{where}.{key}")
        return out
    if isinstance(ours, list) and isinstance(theirs, list):
        return differences(ours[0], theirs[0], f"{where}[0]") if ours and theirs else []
    return [] if ours == theirs else [f"{where}: {ours} here, {theirs} in vLLM's"]


def vllm_shapes() -> dict[str, Any]:
    return json.loads(VLLM_SHAPES.read_text())


def stream_events(text: str) -> list[dict]:
    return [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: {")]
