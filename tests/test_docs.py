"""The user docs a new user can find: a short README.md whose links resolve, a memory
switch table that names the code's own flag, profile key and header, no tracker numbers
or dates in README.md and docs/, and the pages stating what the code does (limits, exit
statuses, each agent's settings as the clients lane writes them). No engine."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from tests.docs_text import README, ROOT, anchors, doc_pages, docs_text, section

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
ISSUE = re.compile(r"\bissues?\s+#?\d+|(?<![\w&/#`])#\d{1,4}\b", re.IGNORECASE)
ISO_DATE = re.compile(r"\b(19|20)\d\d-[01]\d-[0-3]\d\b")


def test_readme_is_one_screen_of_a_front_page():
    lines = README.read_text().splitlines()
    assert len(lines) <= 200, f"README.md has {len(lines)} lines; its text belongs in docs/"


def test_the_readme_states_the_commands_ci_runs():
    ci = (ROOT / ".ci" / "run").read_text()
    text = docs_text("README.md")
    for command in re.findall(r"^make \w+", ci, re.MULTILINE):
        assert f"{command} " in text and "`.ci/run`" in text, command


@pytest.mark.parametrize("page", doc_pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page: Path):
    """Every relative link (README.md's index of docs/ among them) names a file that is
    there, and an anchor one of its headings makes."""
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.DOTALL)
    broken = []
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target):
            continue  # a URL
        path, _, anchor = target.partition("#")
        resolved = (page.parent / path).resolve() if path else page
        if not resolved.exists():
            broken.append(target)
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            broken.append(target)
    assert not broken, f"{page.relative_to(ROOT)}: links to nothing: {broken}"


def test_the_readme_links_every_docs_page():
    linked = {(README.parent / target.partition("#")[0]).resolve()
              for target in LINK.findall(README.read_text())}
    pages = [p for p in doc_pages()[1:] if p.resolve() not in linked]
    assert not pages, f"README.md's index lacks {[str(p.relative_to(ROOT)) for p in pages]}"


@pytest.mark.parametrize("page", doc_pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_issue_numbers_or_dates_in_user_docs(page: Path):
    """The tracker's numbers and the runs' dates belong with the history (bench/HISTORY.md,
    git log), not in what a user reads."""
    found = []
    for number, line in enumerate(page.read_text().splitlines(), 1):
        found += [f"{number}: {m.group(0)}" for m in ISSUE.finditer(line)]
        found += [f"{number}: {m.group(0)}" for m in ISO_DATE.finditer(line)]
    assert not found, f"{page.relative_to(ROOT)}: {found}"


def _switch_table() -> list[str]:
    rows = section("README.md", "The memory switch").splitlines()
    return [row for row in rows if row.startswith("|")]


def test_the_memory_switch_is_one_table_in_the_readme_with_the_codes_names():
    """One row a mode, each naming the flag `tandem serve` takes, the profile key the
    loader reads, and the header the request check takes."""
    from engine.profiles.checks import MEMORY_MODES
    from server.cli.serve import add_serve_arguments
    from server.turn.memory import MEMORY_HEADER

    parser = argparse.ArgumentParser()
    add_serve_arguments(parser)
    flag = next(a for a in parser._actions if "--memory" in a.option_strings)
    assert tuple(flag.choices) == MEMORY_MODES
    rows = _switch_table()
    header = rows[0].lower()
    assert "flag" in header and "profile key" in header and "header" in header, rows[0]
    for mode in MEMORY_MODES:
        row = next((r for r in rows if r.startswith(f"| `{mode}` ")), None)
        assert row is not None, f"no row for {mode}"
        assert f"`--memory {mode}`" in row and f'mode: "{mode}"' in row, row
    header_name = next(w for w in re.findall(r"`(X-Tandem-Memory): ", "\n".join(rows)))
    assert header_name.lower() == MEMORY_HEADER
    for value in ("off", "read"):
        assert any(f"`X-Tandem-Memory: {value}`" in r for r in rows), value
    # each page that used to describe the switch points at this table instead
    elsewhere = [p for p in doc_pages()[1:] if "X-Tandem-Memory: read` |" in p.read_text()]
    assert not elsewhere, f"a second switch table: {elsewhere}"


def test_the_switch_tables_header_rows_say_what_the_code_does():
    """`off` and `read` as the table says: off reads and writes nothing and shows no card;
    read reads (on an `on` profile), drops a block and shows no card."""
    from conductor.memory.context import MemoryContext

    def context(mode, header):
        return MemoryContext(user="u", session="s", project=None, mode=mode, header=header,
                             has_user_message=True)

    off, read = context("on", "off"), context("on", "read")
    assert off.off_reason == "header_off" and not off.reads and not off.writes
    assert read.reads and not read.writes and not read.shows_card
    assert not context("shadow", "read").reads
    shadow = context("shadow", None)
    assert shadow.writes and shadow.shows_card and not shadow.reads
    rows = "\n".join(_switch_table())
    assert "nothing read, nothing written, no card" in rows
    assert "notes written and the card shown, nothing read back" in rows
    assert "notes read (on an `on` profile)" in rows and "dropped" in rows


def test_the_limits_and_exit_statuses_the_docs_state_are_the_codes():
    from conductor.writing.triggers import SESSION_IDLE_S
    from server.access.key_check import MAX_BODY_BYTES as BODY
    from server.cli.serve import ENGINE_DEAD_EXIT, ENGINE_LOAD_FAILED_EXIT
    from server.mcp.http import MAX_BODY_BYTES as MCP_BODY

    assert f"| a request body | {BODY // 2**20} MiB |" in docs_text("docs/serving/limits.md")
    assert f"a `/mcp` request body (one MCP call) | {MCP_BODY // 1024} KiB" in docs_text(
        "docs/serving/limits.md")
    assert f"a `/mcp` request body of {MCP_BODY // 1024} KiB" in docs_text(
        "docs/memory/mcp.md")
    running = docs_text("docs/serving/running.md")
    assert f"exits with status {ENGINE_DEAD_EXIT}" in running
    assert f"exits with status {ENGINE_LOAD_FAILED_EXIT}" in running
    assert f"RestartPreventExitStatus=2 {ENGINE_LOAD_FAILED_EXIT}" in running
    assert f"({SESSION_IDLE_S:.0f} s idle" in docs_text("docs/memory/notes.md")


def _agent_settings(name: str, tmp_path: Path) -> tuple[list[str], dict[str, str], str]:
    from tests.clients.agents import CONFIGURE

    home, project = tmp_path / "home", tmp_path / "project"
    home.mkdir()
    project.mkdir()
    command, env = CONFIGURE[name]("http://127.0.0.1:8000", home, project, 0)
    written = "\n".join(p.read_text() for p in sorted([*home.rglob("*"), *project.rglob("*")])
                        if p.is_file())
    return command, env, written


@pytest.mark.parametrize(("name", "heading"), [
    ("codex", "Codex CLI"), ("claude", "Claude Code"), ("qwen", "Qwen Code"),
    ("opencode", "opencode"), ("aider", "aider")])
def test_each_agents_settings_are_what_the_clients_lane_writes(name, heading, tmp_path):
    """docs/agents.md gives each agent the settings tests/clients/agents.py runs it with:
    its variables, its config file's keys, its flags, and the pinned version measured."""
    from tests.clients.agents import MODEL
    from tests.clients.install import AIDER_PIN, NPM_PINS

    text = section("docs/agents.md", heading)
    command, env, written = _agent_settings(name, tmp_path)
    # the lane's own: its HOME is a temporary folder, so Codex is told where ~/.codex is
    lane_only = {"CODEX_HOME"}
    missing = [var for var in env if var not in text and var not in lane_only]
    if name == "codex":
        missing += [line for line in written.splitlines() if line and line not in text]
    for key in re.findall(r'"(\w+)":', written):
        if key not in text and key not in ("tiny-agent", MODEL):
            missing.append(key)
    documented_flags = set(re.findall(r"(?<![\w-])--[a-z][a-z-]+", text))
    missing += [flag for flag in documented_flags if flag not in command]
    assert not missing, f"docs/agents.md, {heading}: not as the lane writes: {missing}"
    pins = {"codex": NPM_PINS[0], "qwen": NPM_PINS[1], "opencode": NPM_PINS[2],
            "claude": NPM_PINS[3], "aider": AIDER_PIN}
    version = re.split(r"@|==", pins[name])[-1]
    assert version in docs_text("docs/agents.md"), version


def test_the_mcp_settings_are_the_ones_the_clients_lane_runs():
    """The Claude Code command tests/clients/test_mcp_client.py runs is the one
    docs/memory/mcp.md gives, with the tool permission `claude -p` needs."""
    source = (ROOT / "tests" / "clients" / "test_mcp_client.py").read_text()
    assert '"mcp", "add", "tandem", "--", str(TANDEM), "mcp"' in source
    text = section("docs/memory/mcp.md", "Claude Code")
    assert "`claude mcp add tandem -- tandem mcp`" in text
    assert "--allowedTools mcp__tandem" in text and "mcp__tandem" in source
