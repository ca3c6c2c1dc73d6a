"""Each agent as its docs tell a new user to point it at an OpenAI-compatible (or
Anthropic) server, the tool call the scripted model makes it run, and its command.

docs/agents.md's client sections say the same settings (tests/test_docs.py checks them):
what the lane runs is what a user writes. HOME is a temporary folder, so nothing of the
user's is read; each client's own switches turn off its update checks and telemetry, and
every run has a timeout.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from tests.clients.install import bin_path

MODEL = "tiny-agent"  # the profile's name: what `tandem serve --profile tiny-agent` serves
KEY = "sk-tandem-lane"  # clients insist on one; the lane's server has none
PROMPT = "Read README.md and tell me the setup step."
README = "# Demo\n\nThe setup step is: run make.\n"
ANSWER = "The setup step is: run make."
RUN_TIMEOUT_S = 240


@dataclass(frozen=True)
class Agent:
    name: str
    wire: str  # the route its turns take
    tool: str | None  # the tool the scripted model calls (None: aider has no tools)
    arguments: dict | None = None
    # the newest message of its first turn: Claude Code's is its environment (a system
    # message after the user's), every other's the user's prompt
    first_on: str = "user"
    first_when: str = "setup step"

    def rules(self, project: Path) -> list[dict]:
        """The script file: the first turn calls the tool, the turn with its result
        answers from it, anything else (titles, summaries, memory) is one word."""
        rules: list[dict] = [{"on": "tool", "when": "run make", "say": ANSWER}]
        if self.tool is not None:
            arguments = json.loads(json.dumps(self.arguments).replace("{project}",
                                                                      str(project)))
            call = json.dumps({"name": self.tool, "arguments": arguments})
            rules.append({"on": self.first_on, "when": self.first_when, "tools": True,
                          "say": f"<tool_call>\n{call}\n</tool_call>"})
        return [*rules, {"when": "", "say": "OK."}]

    def command(self, base_url: str, home: Path, project: Path, turn: int) -> tuple[
            list[str], dict[str, str]]:
        """The command line and environment of one run (aider's second turn is a second
        run that restores the chat)."""
        return CONFIGURE[self.name](base_url, home, project, turn)


def _codex(base: str, home: Path, project: Path, _turn: int):
    # Codex's docs: a model provider in ~/.codex/config.toml, wire_api "responses".
    (home / ".codex").mkdir(parents=True, exist_ok=True)
    (home / ".codex" / "config.toml").write_text(f'''model = "{MODEL}"
model_provider = "tandem"
check_for_update_on_startup = false

[model_providers.tandem]
name = "Tandem"
base_url = "{base}/v1"
wire_api = "responses"

[analytics]
enabled = false
''')
    return ([str(bin_path("codex")), "exec", "--skip-git-repo-check", PROMPT],
            {"CODEX_HOME": str(home / ".codex")})


def _claude(base: str, _home: Path, _project: Path, _turn: int):
    # Claude Code's docs (LLM gateway): ANTHROPIC_BASE_URL, ANTHROPIC_AUTH_TOKEN,
    # ANTHROPIC_MODEL; nonessential traffic (updates, telemetry, error reports) off.
    return ([str(bin_path("claude")), "-p", PROMPT],
            {"ANTHROPIC_BASE_URL": base, "ANTHROPIC_AUTH_TOKEN": KEY,
             "ANTHROPIC_MODEL": MODEL, "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
             "DISABLE_AUTOUPDATER": "1"})


def _qwen(base: str, home: Path, _project: Path, _turn: int):
    # Qwen Code's docs: OPENAI_BASE_URL, OPENAI_API_KEY, OPENAI_MODEL; usage statistics off.
    (home / ".qwen").mkdir(parents=True, exist_ok=True)
    (home / ".qwen" / "settings.json").write_text(json.dumps(
        {"privacy": {"usageStatisticsEnabled": False},
         "general": {"disableAutoUpdate": True, "disableUpdateNag": True}}))
    return ([str(bin_path("qwen")), "-p", PROMPT],
            {"OPENAI_BASE_URL": f"{base}/v1", "OPENAI_API_KEY": KEY, "OPENAI_MODEL": MODEL})


def _opencode(base: str, _home: Path, project: Path, _turn: int):
    # opencode's docs: a provider in opencode.json through @ai-sdk/openai-compatible.
    (project / "opencode.json").write_text(json.dumps({
        "$schema": "https://opencode.ai/config.json", "autoupdate": False, "share": "disabled",
        "provider": {"tandem": {"npm": "@ai-sdk/openai-compatible", "name": "Tandem",
                                "options": {"baseURL": f"{base}/v1"},
                                "models": {MODEL: {"name": MODEL}}}}}, indent=2))
    return ([str(bin_path("opencode")), "run", "-m", f"tandem/{MODEL}", PROMPT],
            {"OPENCODE_DISABLE_AUTOUPDATE": "1", "OPENCODE_DISABLE_MODELS_FETCH": "1"})


def _aider(base: str, _home: Path, _project: Path, turn: int):
    # aider's docs (OpenAI-compatible APIs): --openai-api-base, --openai-api-key,
    # --model openai/NAME; --yes and --message for a run without questions.
    message = PROMPT if turn == 0 else "And what comes after that step?"
    return ([str(bin_path("aider")), "--openai-api-base", f"{base}/v1", "--openai-api-key",
             KEY, "--model", f"openai/{MODEL}", "--yes", "--no-git", "--no-check-update",
             "--analytics-disable", "--no-show-model-warnings", "--no-stream",
             *(["--restore-chat-history"] if turn else []), "--message", message,
             "README.md"],
            # litellm's documented switch: its bundled price list, not GitHub's at each run
            {"LITELLM_LOCAL_MODEL_COST_MAP": "True"})


CONFIGURE = {"codex": _codex, "claude": _claude, "qwen": _qwen, "opencode": _opencode,
             "aider": _aider}
AGENTS = {
    "codex": Agent("codex", "/v1/responses", "exec_command", {"cmd": "cat README.md"}),
    "claude": Agent("claude", "/v1/messages", "Read",
                    {"file_path": "{project}/README.md"}, first_on="system",
                    first_when="Primary working directory"),
    "qwen": Agent("qwen", "/v1/chat/completions", "read_file",
                  {"file_path": "{project}/README.md"}),
    "opencode": Agent("opencode", "/v1/chat/completions", "read",
                      {"filePath": "{project}/README.md"}),
    "aider": Agent("aider", "/v1/chat/completions", None),
}
