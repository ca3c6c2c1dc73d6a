"""Claude Code configured with Tandem's MCP server as docs/memory/mcp.md says (`claude mcp add
tandem -- tandem mcp`, stdio), against the lane's `tandem serve`: the scripted model calls
`memory_remember` with a distinctive fact, then `memory_search`, through Claude Code's own
MCP client; `tandem mcp` forwards each call to the running server (found through
`$TANDEM_HOME/server.json`).

Claude Code because its MCP tools keep their server's prefix (`mcp__tandem__...`), so they
sit beside the engine's own `memory_search` and `memory_read` on a memory-on server; Codex
CLI and Qwen Code offer them unprefixed, which such a server refuses as a clash
(docs/memory/mcp.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.clients.agents import KEY, MODEL, RUN_TIMEOUT_S
from tests.clients.install import bin_path
from tests.clients.relay import Relay
from tests.clients.test_real_clients import refusals

pytestmark = pytest.mark.clients

PROMPT = "Keep the staging host in my memory, then check it is found."
TITLE, FACT = "Staging database host", "The staging database lives on host orca-7."
ANSWER = "Kept and found: the staging database is on orca-7."
TANDEM = Path(sys.executable).parent / "tandem"  # docs/memory/mcp.md's /path/to/.venv/bin/tandem


def _call(name: str, arguments: dict) -> str:
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


def _text(content: str | list) -> str:
    """A tool_result's text: a string, or its text blocks joined."""
    if isinstance(content, str):
        return content
    return "\n".join(part.get("text", "") for part in content if isinstance(part, dict))


def rules() -> list[dict]:
    """Newest message first matched. Claude Code defers MCP tools: it names them in a
    system message once the server is up (in its environment message when `tandem mcp` was
    up first, in one of its own otherwise), and ToolSearch loads them; either way the
    model gets to memory_remember, then memory_search, then answers from its result."""
    return [
        {"on": "tool", "when": '"results".*orca-7', "say": ANSWER},
        {"on": "tool", "when": r'"op":\s*"add"',
         "say": _call("mcp__tandem__memory_search", {"query": "staging database host"})},
        {"when": "Tool loaded: mcp__tandem__memory_remember|tools are now available",
         "tools": True,
         "say": _call("mcp__tandem__memory_remember", {"title": TITLE, "body": FACT})},
        {"on": "system", "when": "Primary working directory", "tools": True,
         "say": _call("ToolSearch", {"query": "select:mcp__tandem__memory_remember,"
                                               "mcp__tandem__memory_search"})},
        {"when": "", "say": "OK."}]


def test_claude_code_s_mcp_configuration_writes_and_finds_a_note_in_tandem_s_memory(
        clients, agent_server, tmp_path):
    project, home = tmp_path / "project", tmp_path / "home"
    project.mkdir()
    home.mkdir()
    agent_server.rules.write_text(json.dumps(rules()))
    relay = Relay(agent_server.base_url)
    relay.start()
    logged = len(agent_server.log_lines())
    env = {"PATH": os.environ["PATH"], "HOME": str(home), "TERM": "dumb", "NO_COLOR": "1",
           # the user's shell has it when their memory folder is not ~/.tandem; Claude Code
           # passes its environment on to the MCP servers it spawns
           "TANDEM_HOME": str(agent_server.home),
           "ANTHROPIC_BASE_URL": relay.base_url, "ANTHROPIC_AUTH_TOKEN": KEY,
           "ANTHROPIC_MODEL": MODEL, "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
           "DISABLE_AUTOUPDATER": "1"}
    claude = str(bin_path("claude"))
    printed = ""
    # docs/memory/mcp.md's command, then a non-interactive run that allows the server's tools
    # (with no one to ask, `claude -p` refuses a tool it was not allowed).
    for command in ([claude, "mcp", "add", "tandem", "--", str(TANDEM), "mcp"],
                    [claude, "-p", PROMPT, "--allowedTools", "mcp__tandem"]):
        done = subprocess.run(command, cwd=project, capture_output=True, text=True,
                              timeout=RUN_TIMEOUT_S, stdin=subprocess.DEVNULL, env=env)
        printed += done.stdout + done.stderr
        assert done.returncode == 0, printed[-4000:]
    assert refusals(relay, agent_server.log_lines()[logged:]) == []

    # What each tool answered, as Claude Code passed it back to the model.
    texts = [_text(block["content"]) for one in relay.exchanges
             for message in one.body.get("messages", [])
             if isinstance(message.get("content"), list)
             for block in message["content"] if block.get("type") == "tool_result"]
    remembered = [json.loads(t) for t in texts if '"op": "add"' in t]
    assert remembered, f"memory_remember's result never reached the model: {printed[-2000:]}"
    note_id = remembered[0]["id"]
    found = [json.loads(t) for t in texts if '"results"' in t]
    # the search found the note just written, and the model read it there
    assert found and note_id in [hit.get("id") for hit in found[-1]["results"]], found
    assert ANSWER in printed

    # The note is in the user's memory: its file, in the user's notes of the server's home
    # (the memory route would need a session's memory token on a server without keys).
    files = [f for f in (agent_server.home / "memory" / "notes").glob(f"*/user/*--{note_id}.md")]
    assert len(files) == 1 and FACT in files[0].read_text(), files
    # and the server ran the calls: `tandem mcp` forwarded them to its /mcp
    assert any('"POST /mcp' in line for line in agent_server.log_lines()[logged:])
