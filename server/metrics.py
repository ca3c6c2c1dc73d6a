"""GET /metrics: Prometheus text exposition of requests, tokens, TTFT and GPU memory, and
vLLM's own `vllm:` metrics (its engine registers them with prometheus_client), so a
dashboard made for `vllm serve` works unchanged."""

from __future__ import annotations

from collections import Counter

from engine.stats import EngineStats


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


def render_metrics(stats: EngineStats | None, http: HTTPCounters, ready: bool) -> str:
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
        ttft = []
        for kind in sorted(stats.ttft_count):
            ttft.append(f'tandem_ttft_seconds_sum{{kind="{kind}"}} {stats.ttft_sum_s[kind]:.6f}')
            ttft.append(f'tandem_ttft_seconds_count{{kind="{kind}"}} {stats.ttft_count[kind]}')
        lines += _family("tandem_ttft_seconds", "summary", "time to first token", ttft)
    gpu = _gpu_memory_lines()
    if gpu:
        lines += ["# HELP tandem_gpu_memory_used_bytes GPU memory in use (NVML)",
                  "# TYPE tandem_gpu_memory_used_bytes gauge", *gpu]
    return "\n".join(lines) + "\n" + _vllm_metrics()


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
