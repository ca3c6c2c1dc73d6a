"""One cap for a memory call's body: a `/v1/memory` POST whose key is lifted from its body
(server/access/body_credentials.py) and a `/mcp` call (server/mcp/http.py) carry the
same note or query, so they are refused past one constant, owned by the lower part
(server.access; server.mcp imports it, tests/test_layout.py's arrows)."""

from __future__ import annotations

from server.access import body_credentials
from server.mcp import http


def test_mcp_and_the_memory_routes_cap_a_body_with_one_constant():
    assert http.MAX_BODY_BYTES is body_credentials.MAX_MEMORY_BODY_BYTES
    assert body_credentials.MAX_MEMORY_BODY_BYTES == 256 * 1024  # docs/serving/limits.md
