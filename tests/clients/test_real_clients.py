"""Codex CLI, Claude Code, Qwen Code, opencode and aider, at pinned versions and configured
as their docs say, each run unchanged against a real `tandem serve` with memory on: a
tool round trip (the scripted model calls the client's own file tool, the client runs it,
the result reaches the model, the model answers from it), no request refused, and the
turn after the tool call served >= 95% from the prefix cache. aider has no tools: its two
turns run, and its cached fraction is reported (below 0.95: its prompt puts the chat
history before its file messages, so each turn's prompt changes mid-way).

What each request cost is written to test-artifacts/real-clients.json for docs/agents.md."""

from __future__ import annotations

import json
import os
import re
import subprocess
from itertools import pairwise
from pathlib import Path

import pytest

from tests.clients.agents import AGENTS, ANSWER, PROMPT, README, RUN_TIMEOUT_S
from tests.clients.install import REPO
from tests.clients.relay import Exchange, Relay
from tests.docs_text import section

pytestmark = pytest.mark.clients
REPORT = REPO / "test-artifacts" / "real-clients.json"
# Each agent's heading in docs/agents.md, where its measured first prompt is stated.
HEADINGS = {"codex": "Codex CLI", "claude": "Claude Code", "qwen": "Qwen Code",
            "opencode": "opencode", "aider": "aider"}
# How far the stated size may be from this run's: the prompt holds the run's own paths
# and date, a few tokens; a new client version's catalog moves it by hundreds.
STATED_WITHIN = 0.02


def stated_first_prompt(name: str) -> int:
    """The first prompt docs/agents.md says the agent sends, in tokens."""
    found = re.search(r"First prompt, measured: ([\d,]+) tokens",
                      section("docs/agents.md", HEADINGS[name]))
    assert found, f"docs/agents.md states no first prompt for {HEADINGS[name]}"
    return int(found.group(1).replace(",", ""))


def assert_docs_state(name: str, measured: int) -> None:
    """The docs' figure is this run's, within STATED_WITHIN: a client whose prompt grew
    (a new version, a new tool) fails here until the docs say so."""
    stated = stated_first_prompt(name)
    assert abs(stated - measured) <= STATED_WITHIN * measured, (
        f"docs/agents.md states {stated:,} tokens for {HEADINGS[name]}'s first prompt; "
        f"this run measured {measured:,}")


def run_agent(name: str, server, tmp_path: Path) -> tuple[Relay, list[str], str]:
    """The agent's runs through a recording relay: the relay, the server's log lines of
    them, and what the client printed."""
    agent = AGENTS[name]
    project, home = tmp_path / "project", tmp_path / "home"
    project.mkdir()
    home.mkdir()
    (project / "README.md").write_text(README)
    server.rules.write_text(json.dumps(agent.rules(project)))
    relay = Relay(server.base_url)
    relay.start()
    logged = len(server.log_lines())
    printed = ""
    for turn in range(2 if agent.tool is None else 1):
        command, env = agent.command(relay.base_url, home, project, turn)
        done = subprocess.run(command, cwd=project, capture_output=True, text=True,
                              timeout=RUN_TIMEOUT_S, stdin=subprocess.DEVNULL, env={
                                  "PATH": os.environ["PATH"], "HOME": str(home),
                                  "TERM": "dumb", "NO_COLOR": "1", **env})
        printed += done.stdout + done.stderr
        assert done.returncode == 0, printed[-4000:]
    return relay, server.log_lines()[logged:], printed


def cached_fractions(chain: list[Exchange]) -> list[float]:
    """Each request's cached tokens over the previous request's whole prompt."""
    tokens = [one.tokens() for one in chain]
    assert all(tokens), [one.answer[-500:] for one in chain]
    return [round(now[1] / before[0], 4) for before, now in pairwise(tokens)]


def report(name: str, relay: Relay, fractions: list[float]) -> None:
    REPORT.parent.mkdir(exist_ok=True)
    results = json.loads(REPORT.read_text()) if REPORT.exists() else {}
    results[name] = {"requests": [[one.path, one.status, one.tokens(), one.body.get(
        "max_tokens", one.body.get("max_output_tokens"))] for one in relay.exchanges],
                     "cached_fraction_of_previous": fractions}
    REPORT.write_text(json.dumps(results, indent=1))


def refusals(relay: Relay, log_lines: list[str]) -> list[str]:
    """Requests answered 4xx or 5xx: as the relay saw them and as the access log says."""
    seen = [f"{one.path} {one.status}" for one in relay.exchanges if one.status >= 400]
    return seen + [line for line in log_lines
                   if line.startswith("INFO:") and ('" 4' in line or '" 5' in line)]


@pytest.mark.parametrize("name", [n for n in AGENTS if n != "aider"])
def test_an_agent_runs_its_tool_loop_unchanged_and_cached(name, clients, agent_server,
                                                          tmp_path):
    relay, log_lines, printed = run_agent(name, agent_server, tmp_path)
    assert refusals(relay, log_lines) == []
    turns = [one for one in relay.exchanges if one.path.split("?")[0] == AGENTS[name].wire]
    # the turn the tool's result reached: it carries the file's text, which only the
    # client's tool read
    carried = [i for i, one in enumerate(turns) if "run make" in json.dumps(one.body)]
    assert carried, f"the tool's result never reached the model: {printed[-2000:]}"
    second = turns[carried[0]]
    first = next(one for one in reversed(turns[:carried[0]])
                 if PROMPT in json.dumps(one.body) and one.body.get("tools"))
    fractions = cached_fractions([first, second])
    report(name, relay, fractions)
    assert ANSWER in printed
    assert fractions[0] >= 0.95, fractions
    assert_docs_state(name, first.tokens()[0])


def test_aider_s_two_turns_run_and_its_cached_fraction_is_reported(clients, agent_server,
                                                                    tmp_path):
    relay, log_lines, printed = run_agent("aider", agent_server, tmp_path)
    assert refusals(relay, log_lines) == []
    turns = [one for one in relay.exchanges if one.path == "/v1/chat/completions"]
    asked = [one for one in turns if "what comes after" in json.dumps(one.body)]
    assert asked and PROMPT in json.dumps(asked[-1].body)  # turn two carries turn one
    first = next(one for one in turns if PROMPT in json.dumps(one.body))
    fractions = cached_fractions([first, asked[-1]])
    report("aider", relay, fractions)
    assert "OK." in printed
    assert_docs_state("aider", first.tokens()[0])
