"""The grammar the background writer's turn is generated under (xgrammar's EBNF, which
llama.cpp's GBNF reads too): well-formed `<tandem_memory>` blocks, or the words "nothing to
remember". Any model then writes what the block parser takes, a 135M one included; the
grammar cannot make a note true, only well-formed.

What it allows: one to three blocks; `add` with a scope and one of the kinds a writer may
write (a reference, gotcha or runbook: never a rule or ruling, which stand for the user's
own word, nor a program state, which needs a date to check it by), or `update` of one of
the notes the writer's task listed (their ids, spelled out); a title of 3 to 80 characters
on one line; a body of 8 to 300 characters without `<`, so nothing in it can close or open
a block. The caps keep a whole answer inside the writer's token budget in practice (a
block is 100-150 tokens of ordinary text); the grammar cannot count tokens.
"""

from __future__ import annotations

from collections.abc import Iterable

from conductor.notes.note_format import SCOPES

NOTHING = "nothing to remember"
# Not rule/ruling (the user's own word), nor program_state (the store wants a verify_by
# date for it, which a block does not carry)
WRITER_KINDS = ("reference", "gotcha", "runbook")
MAX_BLOCKS = 3


def writer_grammar(update_ids: Iterable[str] = (), scopes: Iterable[str] = SCOPES) -> str:
    """The grammar; `update_ids`: the notes the writer may update (none: add only);
    `scopes`: those it may add to (no project outside a project's conversation)."""
    ids = sorted(set(update_ids))
    block = "add" if not ids else "add | update"
    lines = [
        f'root ::= "{NOTHING}" | block ("\\n" block){{0,{MAX_BLOCKS - 1}}}',
        f"block ::= {block}",
        'add ::= "<tandem_memory op=\\"add\\" scope=\\"" scope "\\" kind=\\"" kind "\\">\\n" '
        "content",
        'content ::= "title: " title "\\n\\n" body "\\n</tandem_memory>"',
        "scope ::= " + " | ".join(f'"{s}"' for s in scopes),
        "kind ::= " + " | ".join(f'"{k}"' for k in WRITER_KINDS),
        # a title and a body start with a visible character: a blank one is refused
        "title ::= [^\\n<> ] [^\\n<>]{2,79}",
        "body ::= [^<\\n ] [^<]{7,299}",
    ]
    if ids:
        lines += ['update ::= "<tandem_memory op=\\"update\\" id=\\"" id "\\">\\n" content',
                  "id ::= " + " | ".join(f'"{i}"' for i in ids)]
    return "\n".join(lines) + "\n"
