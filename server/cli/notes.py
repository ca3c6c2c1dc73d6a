"""``tandem notes ...``: the note store for people without the dashboard.

    tandem notes list    [--scope S] [--kind K] [--status S] [--project P] [--session S]
                         [--archived | --all] [--json]
    tandem notes show    ID [--json]
    tandem notes search  QUERY... [filters] [--limit N] [--json]
    tandem notes ratify  ID
    tandem notes archive ID [--reason TEXT]
    tandem notes delete  ID | --all --yes
    tandem notes export  [--out FILE.zip]
    tandem notes nightly [--all-users]

Every subcommand takes ``--user`` (default: the engine's own user, as ``tandem serve``:
``$TANDEM_USER``, else the OS user name; any name a request may name, filed in the folder
the server files it in) and ``--home`` (default: ``$TANDEM_HOME`` or ``~/.tandem``).
Errors go to stderr with a non-zero exit code, never a traceback.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from datetime import date
from pathlib import Path
from typing import Any

from conductor.memory.settings import MemorySettings
from conductor.memory.types import (
    KINDS,
    SCOPES,
    STATUSES,
    Note,
    NoteStore,
    UserNameError,
    WriteResult,
    default_home,
    default_memory_root,
    user_folder,
)

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2


def default_user() -> str:
    """The engine's own user, as `tandem serve` names it: ``$TANDEM_USER``, else the OS
    user name (a request without a key is theirs). MemorySettings' own default, read
    without building the settings: a bad $TANDEM_NIGHTLY_HOUR is not this command's."""
    (field,) = (f for f in dataclasses.fields(MemorySettings) if f.name == "user_name")
    return field.default_factory()  # type: ignore[misc]


def user_of(name: str | None) -> str:
    """The folder of the user a command's ``--user`` names (None: the default user): the
    very folder an HTTP request for that user reads and writes; UserNameError for a
    name that can be no one's."""
    return user_folder(default_user() if name is None else name)


def user_or_refusal(name: str | None, command: str) -> tuple[str | None, int]:
    """``(folder, 0)`` for ``--user``, or ``(None, 2)`` having said on stderr why the name
    is no one's (for `tandem <command>`)."""
    try:
        return user_of(name), EXIT_OK
    except UserNameError as exc:
        who = (f"--user {name!r}" if name is not None
               else "the default user ($TANDEM_USER, else the OS user name)")
        print(f"tandem {command}: {who}: {exc}", file=sys.stderr)
        return None, EXIT_USAGE


def register(subparsers: Any) -> None:
    """Add the ``notes`` command to an argparse subparsers object."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--user", default=None, help="whose notes (default: "
                        "$TANDEM_USER, else the OS user name)")
    common.add_argument(
        "--home", default=None, help="Tandem home (default: $TANDEM_HOME or ~/.tandem)"
    )

    filters = argparse.ArgumentParser(add_help=False)
    filters.add_argument("--scope", choices=SCOPES)
    filters.add_argument("--kind", choices=KINDS)
    filters.add_argument("--status", choices=STATUSES)
    filters.add_argument("--project", help="project path or key")
    filters.add_argument("--session")
    state = filters.add_mutually_exclusive_group()
    state.add_argument("--archived", action="store_const", dest="state", const="archived")
    state.add_argument("--all", action="store_const", dest="state", const="all")
    filters.set_defaults(state="live")

    as_json = argparse.ArgumentParser(add_help=False)
    as_json.add_argument("--json", action="store_true", help="print JSON")

    notes = subparsers.add_parser("notes", help="memory notes: list, show, search, ratify, ...")
    sub = notes.add_subparsers(dest="notes_command", metavar="COMMAND")
    sub.required = True

    sub.add_parser("list", parents=[common, filters, as_json], help="list notes")
    show = sub.add_parser("show", parents=[common, as_json], help="print one note")
    show.add_argument("id")
    search = sub.add_parser("search", parents=[common, filters, as_json], help="BM25 search")
    search.add_argument("query", nargs="+")
    search.add_argument("--limit", type=int, default=10)
    ratify = sub.add_parser("ratify", parents=[common], help="ratify a note")
    ratify.add_argument("id")
    split = sub.add_parser("split", parents=[common], help="restore a revision of a note as "
                           "a note of its own (undo a merge)")
    split.add_argument("id")
    split.add_argument("revision", type=int, help="the revision number (see notes show)")
    archive = sub.add_parser("archive", parents=[common], help="archive a note")
    archive.add_argument("id")
    archive.add_argument("--reason", default=None)
    delete = sub.add_parser("delete", parents=[common], help="delete a note, or --all of them")
    delete.add_argument("id", nargs="?")
    delete.add_argument(
        "--all", action="store_true", dest="delete_all", help="delete every note of the user"
    )
    delete.add_argument("--yes", action="store_true", help="confirm --all")
    export = sub.add_parser("export", parents=[common], help="zip the user's notes")
    export.add_argument(
        "--out", default=None, help="zip file (default: ./tandem-notes-USER-DATE.zip)"
    )
    nightly = sub.add_parser("nightly", parents=[common], help="run the nightly job now")
    nightly.add_argument("--all-users", action="store_true")

    notes.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Dispatch a parsed ``notes`` command; returns the exit code."""
    handler = _HANDLERS.get(getattr(args, "notes_command", None) or "")
    if handler is None:
        return _fail("choose a notes command: " + ", ".join(_HANDLERS), EXIT_USAGE)
    if not getattr(args, "all_users", False):
        user, code = user_or_refusal(args.user, "notes")
        if user is None:
            return code
        args.user = user  # the folder from here on
    try:
        return handler(args)
    except (ValueError, OSError) as exc:
        return _fail(str(exc))


# ------------------------------------------------------------------------ handlers


def _open(args: argparse.Namespace) -> NoteStore:
    user = args.user if args.user is not None else user_of(None)
    home = Path(args.home).expanduser() if args.home else default_home()
    return NoteStore(default_memory_root(home), user)


def _list(args: argparse.Namespace) -> int:
    store = _open(args)
    notes = store.list(**_filter_args(args))
    if args.json:
        _print_json([_note_json(store, n) for n in notes])
        return EXIT_OK
    if not notes:
        print("no notes", file=sys.stderr)
    for note in notes:
        print(_line(store, note))
    return EXIT_OK


def _show(args: argparse.Namespace) -> int:
    store = _open(args)
    note = store.get(args.id)
    if note is None:
        return _fail(f"no note {args.id}")
    if args.json:
        _print_json(_note_json(store, note, body=True))
        return EXIT_OK
    assert note.path is not None
    sys.stdout.write(note.path.read_text(encoding="utf-8"))
    return EXIT_OK


def _search(args: argparse.Namespace) -> int:
    store = _open(args)
    if args.limit < 1:
        return _fail("--limit must be at least 1", EXIT_USAGE)
    hits = store.search(" ".join(args.query), limit=args.limit, **_filter_args(args))
    if args.json:
        _print_json([{**_note_json(store, n), "score": s} for n, s in hits])
        return EXIT_OK
    if not hits:
        print("no match", file=sys.stderr)
    for note, score in hits:
        print(f"{score:7.3f}  {_line(store, note)}")
    return EXIT_OK


def _ratify(args: argparse.Namespace) -> int:
    return _report(_open(args).ratify(args.id, via="cli"))


def _split(args: argparse.Namespace) -> int:
    return _report(_open(args).split(args.id, args.revision, via="cli"))


def _archive(args: argparse.Namespace) -> int:
    return _report(_open(args).user_archive(args.id, args.reason, via="cli"))


def _delete(args: argparse.Namespace) -> int:
    if args.delete_all == bool(args.id):
        return _fail("give a note id, or --all --yes", EXIT_USAGE)
    store = _open(args)
    if args.delete_all:
        if not args.yes:
            return _fail(
                f"this deletes every note of {store.user}; add --yes to confirm", EXIT_USAGE
            )
        result = store.delete_all(via="cli")
        if result.ok:
            print(f"deleted {result.count} notes of {store.user}")
        return _report(result, quiet=True)
    return _report(store.delete(args.id, via="cli"))


def _export(args: argparse.Namespace) -> int:
    store = _open(args)
    out = args.out or f"tandem-notes-{store.user}-{date.today().isoformat()}.zip"
    path = store.export_zip(Path(out))
    print(path)
    return EXIT_OK


def _nightly(args: argparse.Namespace) -> int:
    from conductor.memory.types import run_nightly, run_nightly_all

    if args.all_users:
        home = Path(args.home).expanduser() if args.home else default_home()
        reports = run_nightly_all(default_memory_root(home))
    else:
        reports = [run_nightly(_open(args))]
    for report in reports:
        print(
            f"{report.user}: {report.live_notes} live notes, "
            f"{report.archives_deleted} old archives deleted, "
            f"{report.marked_stale} marked stale, {report.leftovers_removed} leftovers removed"
        )
    return EXIT_OK


_HANDLERS = {
    "list": _list,
    "show": _show,
    "search": _search,
    "ratify": _ratify,
    "split": _split,
    "archive": _archive,
    "delete": _delete,
    "export": _export,
    "nightly": _nightly,
}


# ------------------------------------------------------------------------- helpers


def _filter_args(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "scope": args.scope,
        "kind": args.kind,
        "status": args.status,
        "project": args.project,
        "session": args.session,
        "state": args.state,
    }


def _line(store: NoteStore, note: Note) -> str:
    where = note.scope if note.scope_key is None else f"{note.scope}:{note.scope_key}"
    flags = [note.status]
    if note.pin_active:
        flags.append("pinned")
    if note.is_stale(store.clock()):
        flags.append("stale")
    if note.archived:
        flags.append("archived")
    if note.archive_proposed:
        flags.append("archive-proposed")
    uses = store.uses_in_days(note.id)
    return f"{note.id}  {','.join(flags):<20} {note.kind:<13} {where:<24} {uses:>3}u  {note.title}"


def _note_json(store: NoteStore, note: Note, body: bool = False) -> dict[str, Any]:
    data = note.to_dict()
    if not body:
        data.pop("body")
        data.pop("changelog")
    data["path"] = str(note.path) if note.path else None
    data["usage"] = store.usage(note.id)
    return data


def _report(result: WriteResult, quiet: bool = False) -> int:
    if result.ok:
        if not quiet and result.note is not None:
            print(f"{result.op}: {result.note.id} ({result.note.status}) {result.note.title}")
        return EXIT_OK
    detail = f": {result.detail}" if result.detail else ""
    return _fail(f"{result.op} refused ({result.reason}){detail}")


def _print_json(data: Any) -> None:
    json.dump(data, sys.stdout, indent=2, ensure_ascii=False, default=str)
    sys.stdout.write("\n")


def _fail(message: str, code: int = EXIT_ERROR) -> int:
    print(f"tandem notes: {message}", file=sys.stderr)
    return code
