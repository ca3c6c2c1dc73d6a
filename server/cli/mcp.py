"""``tandem mcp``: Tandem's memory as an MCP server over stdio, for an agent on any model.

    tandem mcp [--user U] [--home H] [--project PATH]

A client (Claude Code, Codex CLI, Qwen Code, opencode, Cursor) spawns it and talks MCP on
its stdin and stdout. It reads and writes the memory of `tandem serve` (the same
`$TANDEM_HOME` and user), through the running server when there is one (its key:
`$TANDEM_API_KEY`), else on the folder itself. docs/memory/mcp.md.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from conductor.memory.types import default_home
from server.cli.notes import user_or_refusal


def register(subparsers: Any) -> None:
    mcp = subparsers.add_parser("mcp", help="Tandem's memory as an MCP server over stdio "
                                "(memory_search, memory_remember, ...)")
    mcp.add_argument("--user", default=None, help="whose memory (default: $TANDEM_USER, "
                     "else the OS user name, as tandem serve)")
    mcp.add_argument("--home", default=None,
                     help="Tandem home (default: $TANDEM_HOME or ~/.tandem)")
    mcp.add_argument("--project", default=None, metavar="PATH", help="the project's folder: "
                     "its notes too, and memory_remember's scope \"project\" (as "
                     "X-Tandem-Project)")
    mcp.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    # the folder a request for the user reads (one user whatever the case, as serve)
    user, code = user_or_refusal(args.user, "mcp")
    if user is None:
        return code
    home = Path(args.home).expanduser() if args.home else default_home()
    from server.mcp.stdio import run_stdio

    return run_stdio(home, user, args.project, args.user is not None,
                     os.environ.get("TANDEM_API_KEY") or None)
