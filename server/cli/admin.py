"""``tandem admin password``: the password of the admin routes and the Memory screen.

    tandem admin password            asks twice (or reads one line from stdin when piped)
    tandem admin password --clear    removes it: the screen is open on loopback only again

The running server takes the change at its next request; screen sessions signed in under
the old password end.
"""

from __future__ import annotations

import argparse
import getpass
import sys
from typing import Any

from engine.home import tandem_home
from server.access.admin_password import AdminPassword, AdminPasswordError


def register(subparsers: Any) -> None:
    admin = subparsers.add_parser("admin", help="the admin password (Memory screen, "
                                  "/v1/conductor routes)")
    commands = admin.add_subparsers(dest="admin_command", required=True)
    password = commands.add_parser("password", help="set (or --clear) the admin password")
    password.add_argument("--clear", action="store_true", help="remove the password")
    admin.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    store = AdminPassword(tandem_home())
    if args.clear:
        removed = store.clear()
        print("[tandem] admin password removed: the admin routes answer this machine only"
              if removed else "[tandem] no admin password was set", file=sys.stderr)
        return 0
    try:
        store.set(_read_password())
    except AdminPasswordError as exc:
        print(f"tandem: {exc}", file=sys.stderr)
        return 2
    except (EOFError, KeyboardInterrupt):
        print("tandem: no password given", file=sys.stderr)
        return 2
    print(f"[tandem] admin password set ({store.path}, an scrypt hash): sign in on /memory, "
          "or send 'Authorization: Bearer <password>' to /v1/conductor routes",
          file=sys.stderr)
    return 0


def _read_password() -> str:
    if not sys.stdin.isatty():  # a script pipes it in: one line
        line = sys.stdin.readline()
        if not line:
            raise EOFError
        return line.rstrip("\r\n")
    first = getpass.getpass("admin password: ")
    if getpass.getpass("again: ") != first:
        raise AdminPasswordError("the two passwords differ")
    return first
