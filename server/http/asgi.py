"""Helpers for plain ASGI middleware: the routed path and a header, read from the scope."""

from __future__ import annotations

from starlette.types import Scope


def route_path(scope: Scope) -> str:
    """The path the router matches: without the app's root path when the request came
    through it (`--root-path /llm`: `/llm/v1/models` is `/v1/models`, and `/v1/models`
    stays itself), as Starlette's routing has it."""
    path: str = scope["path"]
    root: str = scope.get("root_path", "")
    if root and path.startswith(root) and path[len(root):len(root) + 1] in ("/", ""):
        return path[len(root):] or "/"
    return path


def scope_header(scope: Scope, name: bytes) -> str | None:
    """A request header's value from the ASGI scope (latin-1, as HTTP has it)."""
    for key, value in scope["headers"]:
        if key == name:
            return value.decode("latin-1")
    return None
