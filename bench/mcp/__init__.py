"""The memory tools over MCP: search latency on a large store, remember-then-search."""
