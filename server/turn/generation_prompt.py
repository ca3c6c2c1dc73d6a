"""The generation prompt's text, known from the chat template's source: one render a request.

A request's prompt is its conversation rendered without the generation prompt (the part a
ledger record replays) and the generation prompt after it (`server/turn/prompt.py`'s
`RenderedChat`). Rendering both ways and comparing the two cost 0.30 ms of a memory-on
request's 3.3 ms of CPU in the overhead bench (medians; one render: 0.22 ms; bench/README.md,
"The server's own work under load"). Every template the profiles serve ends with
`{% if add_generation_prompt %}...{% endif %}` whose text depends on `enable_thinking`
alone, so the render with it is the render without it plus a text learned once: one render
splits in two. A template whose source does not show that (one that reads
`add_generation_prompt` elsewhere, or a message in that block) is rendered both ways, as
before.
"""

from __future__ import annotations

import functools

from jinja2 import TemplateSyntaxError, nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment

# The one variable the generation prompt's block may read (Qwen3's closes an empty think
# block when thinking is off); anything else might come from the conversation.
_READS_ALONE = frozenset({"enable_thinking"})


def generation_tail(tokenizer, enable_thinking: bool) -> str | None:
    """The text the generation prompt adds at the end of every render of this tokenizer's
    chat template, or None when its source does not show it is the same for every
    conversation (then the caller renders both ways)."""
    template = getattr(tokenizer, "chat_template", None)
    if not isinstance(template, str) or not _generation_prompt_is_last(template):
        return None
    return _probed(tokenizer, template, enable_thinking)


@functools.lru_cache(maxsize=16)
def _probed(tokenizer, template: str, enable_thinking: bool) -> str | None:
    """The generation prompt's text for `enable_thinking`, from one probe rendered both
    ways (the template is part of the key: a tokenizer given another is probed afresh)."""
    probe = [{"role": "user", "content": "probe"}]
    try:
        renders = [tokenizer.apply_chat_template(probe, tools=None, tokenize=False,
                                                 add_generation_prompt=generation,
                                                 enable_thinking=enable_thinking)
                   for generation in (False, True)]
    except Exception:  # noqa: BLE001 (a template that refuses the probe: render both ways)
        return None
    history, whole = renders
    return whole[len(history):] if whole.startswith(history) else None


@functools.lru_cache(maxsize=8)
def _generation_prompt_is_last(template: str) -> bool:
    """Whether the template's source ends with `{% if add_generation_prompt %}...{% endif %}`
    (no else), reads `add_generation_prompt` nowhere else, and that block reads no variable
    but `enable_thinking`, which nothing in the template sets. Then the render with the
    generation prompt is the render without it followed by a text that depends on
    `enable_thinking` alone, whatever the messages and tools."""
    try:  # parsed as transformers renders it (its own {% generation %} tag aside: refused)
        tree = ImmutableSandboxedEnvironment(
            trim_blocks=True, lstrip_blocks=True,
            extensions=["jinja2.ext.loopcontrols"]).parse(template)
    except TemplateSyntaxError:
        return False
    last = tree.body[-1] if tree.body else None
    if not isinstance(last, nodes.If) or last.elif_ or last.else_ \
            or not isinstance(last.test, nodes.Name) \
            or last.test.name != "add_generation_prompt":
        return False
    names = list(tree.find_all(nodes.Name))
    if sum(n.name == "add_generation_prompt" for n in names) != 1:
        return False
    read = {n.name for part in last.body for n in part.find_all(nodes.Name)}
    set_anywhere = {n.name for n in names if n.ctx != "load"}
    return read <= _READS_ALONE and not read & set_anywhere
