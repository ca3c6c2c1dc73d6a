"""Client tools in the chat route's shape: the one conversion the Messages API's tools
(`input_schema`) and the Responses API's function tools (`parameters`) share.

Each wire says which of its tools this server can run and what a tool's chat `function`
is (`ToolForm`); the loop is shared: each tool an object, a tool that cannot run here (a
hosted or server tool of the API's own) left out with one warning in the log, as an agent
that offers one by default must still get its answer, and a group's tools (a Responses
`namespace`) served as the others.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from server.turn.dialects.params import bad_param

log = logging.getLogger("tandem.server")

Tool = dict[str, Any]


def _no_group(_tool: Tool) -> list[Any] | None:
    return None


@dataclass(frozen=True)
class ToolForm:
    """How one wire writes a client's tool."""

    wire: str  # the wire's name in the log's warning ("messages", "responses")
    runs_here: Callable[[Tool], bool]  # a tool this server can run; the others left out
    function: Callable[[Tool, str], dict[str, Any]]  # its chat `function`; `param` names it
    # a group's tools (its `tools`, named within it), if it is one
    group: Callable[[Tool], list[Any] | None] = _no_group


def chat_tools(tools: list[Any] | None, form: ToolForm) -> list[dict[str, Any]] | None:
    """`tools` as the chat route's (None stays None); an APIError naming the first tool
    that is not one by its place in the client's list (a group's: `tools[3].tools[0]`)."""
    if tools is None:
        return None
    out: list[dict[str, Any]] = []
    left_out: list[str] = []
    _convert(tools, form, "tools", out, left_out)
    if left_out:
        log.warning("%s: tools this server cannot run left out: %s", form.wire,
                    ", ".join(sorted(set(left_out))))
    return out


def _convert(tools: list[Any], form: ToolForm, at: str, out: list[dict[str, Any]],
             left_out: list[str]) -> None:
    """Each of `tools` (the list at `at` in the request) into `out`, or its type into
    `left_out`; a group's tools in its place, named within it."""
    for n, tool in enumerate(tools):
        param = f"{at}[{n}]"
        if not isinstance(tool, dict):
            raise bad_param(param, "a tool is an object")
        grouped = form.group(tool)
        if grouped is not None:
            _convert(grouped, form, f"{param}.tools", out, left_out)
        elif not form.runs_here(tool):
            left_out.append(str(tool.get("type"))[:40])
        else:
            out.append({"type": "function", "function": form.function(tool, param)})
