"""Tests only: a scripted profile's answers for clients that send no `script` field.

A real agent (Codex CLI, Claude Code, ...) sends its own requests, which carry no `script`.
With `$TANDEM_SCRIPT_FILE` naming a JSON file, a scripted profile answers such a request
by the file's first rule that matches its newest message:

    [{"on": "tool", "when": "README", "say": "The file lists the setup steps."},
     {"on": "user", "when": "(?i)list the files", "say": "<tool_call>...</tool_call>"},
     {"when": "", "say": "Done."}]

`on` is the newest message's role (`user`, `tool`, `system`, or `any`, the default), `when`
a regular expression searched in its text, `tools` (optional) whether the request must
offer tools or must not (an agent's title request offers none), `say` the script (a text,
or one text a generation). The
file is read at each request, so a test may rewrite it between turns. A request no rule
matches is the model's own (random weights: noise). Never set on a served profile: only a
profile with `scripted: true` reads it.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from server.http.schema import ChatCompletionRequest

ENV = "TANDEM_SCRIPT_FILE"


def script_from_file(request: ChatCompletionRequest) -> str | list[str | None] | None:
    """The `say` of the first rule the request's newest message matches, or None."""
    path = os.environ.get(ENV)
    if not path or not request.messages:
        return None
    rules = json.loads(Path(path).read_text(encoding="utf-8"))
    newest = request.messages[-1]
    try:
        text = newest.text()
    except ValueError:
        text = ""
    offers_tools = bool(request.tools)
    for rule in rules:
        if rule.get("tools", offers_tools) != offers_tools:
            continue
        if rule.get("on", "any") in ("any", newest.role) and re.search(
                rule.get("when", ""), text, re.S):
            return rule["say"]
    return None
