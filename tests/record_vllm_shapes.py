"""Records plain vLLM's response shapes into tests/data/vllm_shapes.json:
`python -m tests.record_vllm_shapes` (the endpoint session checks they still hold)."""

from __future__ import annotations

import json

import httpx

from tests.shapes import VLLM_SHAPES, shape, stream_events

# The switches of plain vLLM's server that change its responses' shapes, the same in the
# record and in the endpoint session's live server (tests/conftest.py::plain_vllm_server):
# the prompt's cached tokens in usage, as Tandem reports them and as a test reads one
# request's own (the server's counters count every request).
VLLM_FLAGS = ("--enable-prompt-tokens-details",)

REQUESTS = {
    "chat": ("/chat/completions", {"messages": [{"role": "user", "content": "hi"}],
                                   "max_tokens": 4}),
    "chat_logprobs": ("/chat/completions", {"messages": [{"role": "user", "content": "hi"}],
                                            "max_tokens": 4, "logprobs": True,
                                            "top_logprobs": 2}),
    "completion": ("/completions", {"prompt": "Once upon", "max_tokens": 4}),
    "completion_echo": ("/completions", {"prompt": "Once upon", "max_tokens": 4,
                                         "echo": True}),
    "completion_logprobs": ("/completions", {"prompt": "Once upon", "max_tokens": 4,
                                             "logprobs": 2}),
}


def responses(base: str, model: str, headers: dict[str, str] | None = None
              ) -> dict[str, object]:
    """Each request's response shape, and its streamed chunks' (first and last)."""
    out: dict[str, object] = {}
    for name, (path, body) in REQUESTS.items():
        body = {"model": model, "temperature": 0, **body}
        out[name] = shape(httpx.post(f"{base}{path}", json=body, headers=headers,
                                     timeout=120).json())
        streamed = httpx.post(f"{base}{path}", headers=headers, timeout=120, json={
            **body, "stream": True, "stream_options": {"include_usage": True}})
        events = stream_events(streamed.text)
        with_choices = [e for e in events if e.get("choices")]
        out[f"{name}_chunk_first"] = shape(with_choices[0])
        out[f"{name}_chunk_last"] = shape(with_choices[-1])
        out[f"{name}_chunk_usage"] = shape(events[-1])
    return out


if __name__ == "__main__":
    from bench.load.plain_vllm import plain_vllm
    from engine.home import tandem_home
    from engine.model_builder import models_dir

    with plain_vllm(models_dir(tandem_home()) / "tiny-qwen3", "tiny", *VLLM_FLAGS) as url:
        shapes = responses(url, "tiny")
    VLLM_SHAPES.write_text(json.dumps(shapes, indent=1, sort_keys=True) + "\n")
    print(f"wrote {VLLM_SHAPES}")
