"""ORCA load reports on answers, as vLLM sends them: the `endpoint-load-metrics` header.

A request to `/v1/chat/completions`, `/v1/completions` or `/invocations` that carries
`endpoint-load-metrics-format: TEXT` (or `JSON`) gets, on a successful non-streamed
answer, the engine's load read from vLLM's own Prometheus gauges at that moment:

    endpoint-load-metrics: TEXT named_metrics.kv_cache_usage_perc=0.02, named_metrics.nu...
    endpoint-load-metrics: JSON {"named_metrics": {"kv_cache_usage_perc": 0.02, ...}}

(`vllm/entrypoints/serve/utils/orca_metrics.py`; a load balancer such as Envoy reads it).
Another format, a stream or an error: no header, as vLLM.
"""

from __future__ import annotations

import json
import logging

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from server.http.asgi import route_path, scope_header

FORMAT_HEADER = b"endpoint-load-metrics-format"
REPORT_HEADER = b"endpoint-load-metrics"
FORMATS = ("text", "json")
REPORTED_ROUTES = frozenset({"/v1/chat/completions", "/v1/completions", "/invocations"})
log = logging.getLogger("tandem.orca")


def named_metrics() -> list[tuple[str, float]]:
    """vLLM's ORCA metrics (KV cache use, requests waiting) from its Prometheus gauges."""
    from vllm.entrypoints.serve.utils.orca_metrics import get_named_metrics_from_prometheus

    try:
        return get_named_metrics_from_prometheus()
    except Exception:  # a report is a courtesy: never fail the answer over it
        log.exception("reading vLLM's gauges for the ORCA report failed")
        return []


def orca_header(metrics_format: str, metrics: list[tuple[str, float]]) -> str:
    """The header's value in `metrics_format`: "text" or "json"."""
    if metrics_format == "text":
        return "TEXT " + ", ".join(f"named_metrics.{name}={value}" for name, value in metrics)
    return "JSON " + json.dumps({"named_metrics": dict(metrics)})


class OrcaLoadReport:
    """Adds the ORCA header to the answers that asked for one (ASGI middleware)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        wanted = ""
        if scope["type"] == "http" and scope["method"] == "POST" \
                and route_path(scope) in REPORTED_ROUTES:
            wanted = (scope_header(scope, FORMAT_HEADER) or "").strip().lower()
        if wanted not in FORMATS:
            await self.app(scope, receive, send)
            return

        async def send_with_report(message: Message) -> None:
            if message["type"] == "http.response.start" and message["status"] == 200:
                headers = message.get("headers", [])
                content_type = next((v for k, v in headers if k.lower() == b"content-type"),
                                    b"")
                if content_type.startswith(b"application/json"):
                    value = orca_header(wanted, named_metrics())
                    message = {**message,
                               "headers": [*headers, (REPORT_HEADER, value.encode("latin-1"))]}
            await send(message)

        await self.app(scope, receive, send_with_report)
