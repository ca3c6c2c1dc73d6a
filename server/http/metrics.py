"""GET /metrics: Prometheus text exposition of requests, tokens, TTFT and GPU memory, and
vLLM's own `vllm:` metrics (its engine registers them with prometheus_client), so a
dashboard made for `vllm serve` works unchanged."""

from __future__ import annotations

from collections import Counter
from typing import Any

from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client import Counter as PromCounter

from engine.stats import EngineStats, RequestTimings

SECONDS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
TOKEN_SECONDS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
TOKENS = (16, 64, 256, 1024, 4096, 16384, 65536)
NOTE_WRITES = frozenset({"add", "update", "archive", "ratify", "pin", "unpin", "delete",
                         "block", "revise"})


class TandemMetrics:
    """Histograms that aggregate across instances, and memory's counters, in one registry
    an app; `render_metrics` writes them with the rest."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r, kind = self.registry, ["kind"]
        self.ttft = Histogram("tandem_ttft_seconds", "time to first token", kind,
                              buckets=SECONDS, registry=r)
        self.tpot = Histogram("tandem_time_per_output_token_seconds",
                              "decode time per output token after the first", kind,
                              buckets=TOKEN_SECONDS, registry=r)
        self.prompt = Histogram("tandem_request_prompt_tokens", "prompt tokens a request",
                                kind, buckets=TOKENS, registry=r)
        self.cached = Histogram("tandem_request_cached_tokens",
                                "prompt tokens a request found in the prefix cache", kind,
                                buckets=TOKENS, registry=r)
        self.notes_written = PromCounter("tandem_notes_written", "note writes by operation",
                                         ["op"], registry=r)
        self.notes_refused = PromCounter("tandem_notes_refused", "refused note writes by reason",
                                         ["reason"], registry=r)
        self.hidden_tokens = PromCounter("tandem_hidden_context_tokens",
                                         "hidden-context tokens put in prompts, by kind",
                                         kind, registry=r)
        self.background_runs = PromCounter("tandem_background_runs",
                                           "background runs (writer, jobs, prewarms) by "
                                           "outcome", ["run", "outcome"], registry=r)
        self.preemptions = PromCounter("tandem_background_preemptions",
                                       "background runs a client request ended", ["run"],
                                       registry=r)

    def request_finished(self, timings: RequestTimings) -> None:
        kind = timings.kind
        if timings.ttft_s is not None:
            self.ttft.labels(kind).observe(timings.ttft_s)
        if timings.decode_s_per_token is not None:
            self.tpot.labels(kind).observe(timings.decode_s_per_token)
        self.prompt.labels(kind).observe(timings.prompt_tokens)
        self.cached.labels(kind).observe(timings.cached_tokens)

    def journal_entry(self, entry: dict[str, Any]) -> None:
        """A notes-store journal entry (ids and codes only)."""
        if entry.get("ok") is False and entry.get("reason"):
            self.notes_refused.labels(str(entry["reason"])).inc()
        elif entry.get("ok") and entry.get("op") in NOTE_WRITES:
            self.notes_written.labels(str(entry["op"])).inc()

    def hidden(self, kind: str, tokens: int) -> None:
        self.hidden_tokens.labels(kind).inc(tokens)

    def background_run(self, run: str, outcome: str) -> None:
        self.background_runs.labels(run, outcome).inc()
        if outcome == "preempted":
            self.preemptions.labels(run).inc()


class HTTPCounters:
    def __init__(self) -> None:
        self.responses: Counter = Counter()  # (route, status) -> count

    def record(self, route: str, status: int) -> None:
        self.responses[(route, status)] += 1


def _gpu_memory_lines() -> list[str]:
    """Used and total memory of each GPU NVML sees; nothing without a GPU."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:
        return []
    lines = []
    try:
        for index in range(pynvml.nvmlDeviceGetCount()):
            info = pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(index))
            lines.append(f'tandem_gpu_memory_used_bytes{{gpu="{index}"}} {info.used}')
            lines.append(f'tandem_gpu_memory_total_bytes{{gpu="{index}"}} {info.total}')
    finally:
        pynvml.nvmlShutdown()
    return lines


def _family(name: str, kind: str, help_text: str, samples: list[str]) -> list[str]:
    return [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}", *samples]


def render_metrics(stats: EngineStats | None, http: HTTPCounters, ready: bool,
                   metrics: TandemMetrics | None = None) -> str:
    lines: list[str] = []
    lines += _family("tandem_engine_ready", "gauge", "1 once the engine serves requests",
                     [f"tandem_engine_ready {int(ready)}"])
    lines += _family(
        "tandem_http_responses_total", "counter", "HTTP responses by route and status",
        [f'tandem_http_responses_total{{route="{r}",status="{s}"}} {n}'
         for (r, s), n in sorted(http.responses.items())],
    )
    if stats is not None:
        per_kind = [
            ("tandem_requests_started_total", "engine requests started", stats.requests_started),
            ("tandem_requests_finished_total", "engine requests finished",
             stats.requests_finished),
            ("tandem_requests_aborted_total", "engine requests aborted", stats.requests_aborted),
            ("tandem_prompt_tokens_total", "prompt tokens of finished requests",
             stats.prompt_tokens),
            ("tandem_cached_tokens_total", "prompt tokens served by the prefix cache",
             stats.cached_tokens),
            ("tandem_output_tokens_total", "generated tokens", stats.output_tokens),
        ]
        for name, help_text, counter in per_kind:
            lines += _family(name, "counter", help_text,
                             [f'{name}{{kind="{k}"}} {v}' for k, v in sorted(counter.items())])
        if stats.background_yields:
            name = "tandem_background_yields_total"
            lines += _family(name, "counter", "background requests that gave way to a client "
                             "on an HTTP backend, by how",
                             [f'{name}{{how="{k}"}} {v}'
                              for k, v in sorted(stats.background_yields.items())])
    gpu = _gpu_memory_lines()
    if gpu:
        lines += ["# HELP tandem_gpu_memory_used_bytes GPU memory in use (NVML)",
                  "# TYPE tandem_gpu_memory_used_bytes gauge", *gpu]
    ours = generate_latest(metrics.registry).decode() if metrics is not None else ""
    return "\n".join(lines) + "\n" + ours + _vllm_metrics()


def _vllm_metrics() -> str:
    """The `vllm:` families of prometheus_client's default registry (empty before an
    engine has started)."""
    from prometheus_client import REGISTRY, generate_latest

    text = generate_latest(REGISTRY).decode()
    families, keep = [], False
    for line in text.splitlines():
        # The registry's process and Python collectors describe this process, not vLLM's.
        if line.startswith(("# HELP ", "# TYPE ")):
            keep = line.split(" ", 3)[2].startswith("vllm:")
        if keep:
            families.append(line)
    return "\n".join(families) + ("\n" if families else "")
