"""Subcommands that other packages add to `tandem`: each is an entry point in the
``tandem.cli`` group (pyproject.toml), a function ``register(commands, resolve_profile)``
that adds its parser. The bench offers `tandem bench` this way, so the server imports
nothing from the bench and the bench nothing from the CLI."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from importlib.metadata import entry_points

from engine.profiles import Profile

GROUP = "tandem.cli"
# The subcommands a checkout of Tandem offers: one whose entry point is missing (an
# install made before it was declared, or without its package) still answers, with a
# message saying why it cannot run, rather than argparse's "invalid choice".
EXPECTED = {"bench": "measure TTFT, decode and prefix reuse per memory mode, and "
                     "background-turn preemption"}


def register_plugins(commands: argparse._SubParsersAction,
                     resolve_profile: Callable[[str | None], Profile]) -> None:
    """Add every installed ``tandem.cli`` subcommand, and a stand-in for each expected
    one that is not installed."""
    found = {point.name: point for point in entry_points(group=GROUP)}
    for name in sorted(found):
        try:
            register = found[name].load()
        except ImportError as exc:  # declared, but its package is not importable
            _stand_in(commands, name, EXPECTED.get(name, name), f"it does not load ({exc})")
            continue
        register(commands, resolve_profile)
    for name, help_text in EXPECTED.items():
        if name not in found:
            _stand_in(commands, name, help_text,
                      f"no {name!r} entry point in the {GROUP!r} group is installed")


def _stand_in(commands: argparse._SubParsersAction, name: str, help_text: str,
              why: str) -> None:
    # No options of its own ('\0' prefixes none), so any flags the user gave land in
    # `rest` and the message below is what they see, whatever they typed.
    parser = commands.add_parser(name, help=f"{help_text} (not installed)", add_help=False,
                                 prefix_chars="\0")
    parser.add_argument("rest", nargs="*")

    def missing(_args: argparse.Namespace) -> int:
        print(f"tandem: `tandem {name}` is not installed: {why}. Reinstall Tandem from its "
              "checkout (make setup, or .venv/bin/pip install -e . --no-deps) to register "
              "it.", file=sys.stderr)
        return 2

    parser.set_defaults(func=missing)
