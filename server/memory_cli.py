"""``tandem memory ...``: the memory layers for people at a terminal.

    tandem memory layers  [--user U] [--home H] [--profile P] [--json]
    tandem memory history [--user U] [--home H] [--last N] [--json]

`layers` lists each layer's files with their sizes and token counts (with the profile's
tokenizer, when its model is on this machine) and the consolidation checkpoint; `history`
prints the last turns of the continuous conversation. Reads only; errors go to stderr.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from datetime import timedelta, timezone
from pathlib import Path
from typing import Any

from conductor.layers.inventory import summary
from conductor.layers.turn_format import Turn
from conductor.layers.user_layers import UserLayers
from conductor.notes_cli import default_user
from conductor.paths import default_home, valid_user


def register(subparsers: Any, default_profile: Callable[[], str]) -> None:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--user", default=None, help="whose layers (default: the OS user name)")
    common.add_argument("--home", default=None,
                        help="Tandem home (default: $TANDEM_HOME or ~/.tandem)")
    common.add_argument("--json", action="store_true", help="print JSON")
    memory = subparsers.add_parser("memory", help="memory layers: list them, print history")
    sub = memory.add_subparsers(dest="memory_command", metavar="COMMAND", required=True)
    layers = sub.add_parser("layers", parents=[common], help="each layer's files, sizes, "
                            "token counts, and the checkpoint")
    layers.add_argument("--profile", default=None, help="whose tokenizer counts tokens "
                        "(default: the default profile)")
    history = sub.add_parser("history", parents=[common], help="the last turns of the "
                             "continuous conversation")
    history.add_argument("--last", type=int, default=10, metavar="N", help="how many (default 10)")
    memory.set_defaults(func=lambda args: run(args, default_profile))


def run(args: argparse.Namespace, default_profile: Callable[[], str]) -> int:
    user = args.user or default_user()
    if not valid_user(user):
        print(f"tandem memory: not a user name: {user!r}", file=sys.stderr)
        return 2
    home = Path(args.home).expanduser() if args.home else default_home()
    layers = UserLayers(home / "memory", user)
    if args.memory_command == "history":
        if args.last < 1:
            print("tandem memory history: --last must be at least 1", file=sys.stderr)
            return 2
        turns = layers.history.page(None, args.last)
        if args.json:
            print(json.dumps([t.to_json() for t in turns], ensure_ascii=False, indent=1))
        else:
            print("\n\n".join(_turn_text(t) for t in turns) if turns else "no turns yet")
        return 0
    count = _token_counter(args.profile or default_profile(), home)
    found = summary(layers, count)
    if args.json:
        print(json.dumps(found, indent=1))
        return 0
    print(f"layers of {user} in {layers.files.user_dir}")
    for f in found["files"]:
        tokens = "-" if f["tokens"] is None else f["tokens"]
        print(f"  {f['layer']:<9} {f['name']:<18} {f['bytes']:>7} bytes {tokens:>6} tokens")
    history = found["history"]
    print(f"  history   {history['turns']} turns, last #{history['last_seq']}; "
          f"checkpoint #{found['checkpoint_seq']}; replay from #{found['window_start']}")
    if history["quarantined"]:
        print(f"  quarantined: {', '.join(history['quarantined'])}")
    if count is None:
        print("  (token counts need the profile's model on this machine: tandem build-model)")
    return 0


def _turn_text(turn: Turn) -> str:
    local = turn.time.astimezone(timezone(timedelta(minutes=turn.utc_offset_minutes)))
    head = f"#{turn.seq}  {local:%Y-%m-%d %H:%M %z}" + ("  (interrupted)" if turn.interrupted
                                                       else "")
    lines = [head]
    for message in turn.messages:
        text = message.shown() if message.role == "assistant" else message.text()
        calls = "".join(f"\n    -> {c.name}({c.arguments})" for c in message.tool_calls())
        lines.append(f"  {message.role}: {text.strip()}{calls}")
    return "\n".join(lines)


def _token_counter(profile_name: str, home: Path) -> Callable[[str], int] | None:
    """The profile's tokenizer as a counter, or None when its model is not here."""
    from engine.model_builder import is_intact, model_path
    from engine.profiles import ProfileError, load_profile

    try:
        profile = load_profile(profile_name)
    except ProfileError:
        return None
    if profile.builtin_model:
        path = model_path(home, profile.builtin_model)
        if not is_intact(path):
            return None
        source = str(path)
    elif Path(profile.tokenizer or profile.model).is_dir():
        source = profile.tokenizer or profile.model
    else:
        return None
    from engine.engine import load_tokenizer

    tokenizer = load_tokenizer(source)
    return lambda text: len(tokenizer.encode(text, add_special_tokens=False))
