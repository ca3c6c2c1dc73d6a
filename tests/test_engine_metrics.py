"""vLLM's own engine counters on /metrics, read as a vLLM dashboard reads them: what the
engine computed for each request, hidden memory included (it is the engine's work), agrees
with the usage the client was told (prompt tokens less cached ones, plus the answer)."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from tests.inprocess import InProcessApp

WATCHED = ("vllm:iteration_tokens_total_sum", "vllm:prompt_tokens_total",
           "vllm:generation_tokens_total", "vllm:request_success_total")


def engine_totals(app: InProcessApp) -> dict[str, float]:
    totals = dict.fromkeys(WATCHED, 0.0)
    for family in text_string_to_metric_families(app.request("GET", "/metrics").text):
        for sample in family.samples:
            if sample.name in totals:
                totals[sample.name] += sample.value
    return totals


def test_the_engines_token_counts_agree_with_each_answers_usage(served, tmp_path):
    app = InProcessApp(served, tmp_path)
    before = engine_totals(app)
    usages = [app.request("POST", "/v1/completions", json={
        "model": "tiny", "prompt": "Hello my name is Robert and I love magic",
        "max_tokens": 10, "min_tokens": 10}).json()["usage"] for _ in range(3)]
    ask = [{"role": "user", "content": "What do you remember?"}]
    _, usage, _ = app.chat(ask, "Nothing yet.", headers={"X-Tandem-Session": "counted"})
    assert usage["prompt_tokens"] > 20  # memory's card and index are in this prompt
    usages.append(usage)
    after = engine_totals(app)
    delta = {name: after[name] - before[name] for name in WATCHED}
    prompt = sum(u["prompt_tokens"] for u in usages)
    cached = sum((u.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
                 for u in usages)
    answered = sum(u["completion_tokens"] for u in usages)
    assert delta["vllm:request_success_total"] == len(usages)
    assert delta["vllm:prompt_tokens_total"] == prompt
    assert delta["vllm:generation_tokens_total"] == answered
    assert delta["vllm:iteration_tokens_total_sum"] == prompt - cached + answered
