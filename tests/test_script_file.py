"""The tests' script file (server/turn/script_file.py): a real client's request, which
carries no `script`, is answered by the first rule its newest message matches (and, where
a rule says, whether the request offers tools), on the real engine; a profile that is not
scripted never reads it."""

from __future__ import annotations

import json

from tests.inprocess import InProcessApp


def test_a_request_without_script_takes_the_first_matching_rule(served, tmp_path,
                                                                monkeypatch):
    rules = tmp_path / "rules.json"
    rules.write_text(json.dumps([
        # an agent's turn offers tools; its title request, with the same text, offers none
        {"on": "user", "when": "(?i)read the readme", "tools": True, "say": "With tools."},
        {"on": "tool", "when": "README", "say": "The README lists the setup steps."},
        {"on": "user", "when": "(?i)list the files", "say": "Listing them now."},
        {"when": "", "say": "Done."}]))
    monkeypatch.setenv("TANDEM_SCRIPT_FILE", str(rules))
    app = InProcessApp(served, tmp_path / "home")

    def ask(messages, **fields) -> str:
        answer = app.request("POST", "/v1/chat/completions",
                             json={"model": "tiny", "messages": messages, **fields})
        assert answer.status_code == 200, answer.text
        return answer.json()["choices"][0]["message"]["content"]

    assert ask([{"role": "user", "content": "Please list the files."}]) == "Listing them now."
    assert ask([{"role": "user", "content": "Hello"}]) == "Done."
    readme = [{"role": "user", "content": "Read the README, please."}]
    assert ask(readme) == "Done."
    assert ask(readme, tools=[{"type": "function", "function": {
        "name": "read", "parameters": {"type": "object"}}}]) == "With tools."
    called = [{"role": "user", "content": "Read it."},
              {"role": "assistant", "content": "", "tool_calls": [{
                  "id": "c1", "type": "function",
                  "function": {"name": "read", "arguments": "{}"}}]},
              {"role": "tool", "tool_call_id": "c1", "content": "# README\nsetup"}]
    assert ask(called) == "The README lists the setup steps."
