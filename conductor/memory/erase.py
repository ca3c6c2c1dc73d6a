"""A user's delete: every file of theirs under the memory root goes.

Where a user's data lands under ``$TANDEM_HOME/memory`` (``conductor.storage.paths`` and
the layouts it points to):

    notes/<user>/                        notes, revisions, archive, INDEX.md, usage
    index/<user>/                        the notes' tantivy index
    layers/<user>/                       core, working memory, semantic, the continuous
                                         conversation's turns, job state and runs, and
                                         the search index (embedded Qdrant: embed/)
    library/<user>/                      the user's documents for search
    locks/<user>.lock, <user>.layers.lock
    ledger/<hash of user and session>.json   each session's records
    ledger/shown/<hash of user>.json     answers as shown
    ledger/responses/<hash of user>/     stored responses (the Responses API)
    journal.jsonl                        entries naming the user

With replicas (README: More than one machine) the notes root is shared and each replica
keeps its search indexes in its own ``$TANDEM_INDEX_DIR`` (``index/<user>/``,
``layers/<user>/embed/``): the delete removes the asking replica's, and every other
replica drops its own once it finds the user's files gone from the shared root, when
the user arrives there or when it starts (`drop_indexes_of_gone_users`).

The journal keeps one entry of the delete in their place: the user's name, where it was
asked from and what went, in counts (the journal never holds a title or a body). What a
server holds besides (session tokens, API keys, caches, a Qdrant server's collections) it
drops itself, before this runs (``conductor.memory.services.MemoryServices.delete_user``).
It lives in the front door, above every part whose files it removes (the notes', the
layers', the ledger's), as storage below them may import none of them.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from collections.abc import Iterable, Mapping
from pathlib import Path

from conductor.layers.paths import LayerFiles
from conductor.ledger.files import LedgerFiles, ShownAnswerFiles
from conductor.ledger.stored_responses import ResponseStore
from conductor.storage.atomic import FileLock, remove_file
from conductor.storage.journal import Journal
from conductor.storage.paths import Layout, index_home, valid_user

log = logging.getLogger("tandem.memory")
LIBRARY_DIR = "library"


def erase_user(root: Path, user: str, *, via: str, responses: ResponseStore | None = None,
               also: Mapping[str, int] | None = None) -> dict[str, int]:
    """Remove every file and folder of `user` under the memory root `root`, then replace
    their journal entries with one entry of the delete. `responses`: the live store (a
    response still being written for the user is then dropped too); `also`: counts of
    what the caller removed elsewhere, for that entry. Returns what went, by kind."""
    if not valid_user(user):
        raise ValueError(f"not a user name: {user!r}")
    layout, layers = Layout(root, user), LayerFiles(root, user)
    counts: dict[str, int] = {}
    # Each tree under its own lock, one at a time (a job may hold the layers' lock while
    # it writes a note): a write in progress finishes first and nothing is half-removed.
    with FileLock(layout.lock_path):
        counts["notes"] = _files(layout.user_dir, "*.md") - _files(layout.revisions_dir,
                                                                   "*.md")
        counts["notes"] -= int(layout.index_md.exists())
        counts["revisions"] = _files(layout.revisions_dir, "*.md")
        _remove_tree(layout.user_dir)
        _remove_tree(layout.index_dir)
        remove_file(layout.lock_path)  # whoever locks it next makes a new one
    with FileLock(layers.lock_path):
        embed = layers.user_dir / "embed"  # the search index (conductor.search.index)
        counts["history_turns"] = _files(layers.turns_dir, "*.json")
        counts["search_index"] = int(embed.exists())
        counts["layer_files"] = (_files(layers.user_dir, "*") - counts["history_turns"]
                                 - _files(embed, "*"))
        _remove_tree(layers.user_dir)
        # replicas: this replica's own search index of the user (its $TANDEM_INDEX_DIR)
        replica_layers = _replica_index_dirs(root, user)[1:]
        counts["search_index"] += sum(folder.exists() for folder in replica_layers)
        for folder in replica_layers:
            _remove_tree(folder)
        remove_file(layers.lock_path)
    counts["library_files"] = _files(root / LIBRARY_DIR / user, "*")
    _remove_tree(root / LIBRARY_DIR / user)
    counts["ledger_sessions"] = _remove_sessions(LedgerFiles(root).folder, user)
    remove_file(ShownAnswerFiles(root).path_for(user), kind="ledger")
    (responses or ResponseStore(root)).delete_user(user)
    audit = {**counts, **(also or {})}
    counts["journal_entries"] = Journal(layout.journal_path).erase_user(
        user, ok=True, via=via, by="user", counts=audit)
    return {**audit, "journal_entries": counts["journal_entries"]}


def _replica_index_dirs(root: Path, user: str) -> list[Path]:
    """This replica's own index folders of `user` (the notes' index, then the search
    index) when its indexes sit apart from the notes root (``$TANDEM_INDEX_DIR``); none
    when they sit under it (one machine: the delete's own folders cover them)."""
    home = index_home(root)
    if home.resolve() == root.resolve():
        return []
    return [home / "index" / user, LayerFiles(home, user).user_dir]


def drop_indexes_of_gone_users(root: Path, users: Iterable[str] | None = None) -> int:
    """Replicas: drop this replica's index folders of each of `users` (default: every
    user it keeps an index of) whose files are gone from the shared notes root, neither
    notes nor layers (deleted on another replica): an index is derived from those files,
    and none of a deleted user's words may stay. Returns how many users' indexes went."""
    home = index_home(root)
    if home.resolve() == root.resolve():
        return 0
    if users is None:
        users = {p.name for part in ("index", "layers") if (home / part).is_dir()
                 for p in (home / part).iterdir() if valid_user(p.name)}
    dropped = 0
    for user in sorted(users):
        if not valid_user(user) or Layout(root, user).user_dir.exists() \
                or LayerFiles(root, user).user_dir.exists():
            continue
        folders = [f for f in _replica_index_dirs(root, user) if f.exists() or f.is_symlink()]
        for folder in folders:
            _remove_tree(folder)
        dropped += bool(folders)
    if dropped:  # a count only: a user's name is theirs
        log.info("dropped this replica's indexes of %d deleted user(s)", dropped)
    return dropped


def _files(folder: Path, pattern: str) -> int:
    """Files under `folder` whose names match `pattern` (0 when there is no folder)."""
    if not folder.is_dir() or folder.is_symlink():
        return 0
    return sum(1 for p in folder.rglob(pattern) if p.is_file() and not p.is_symlink())


def _remove_tree(folder: Path) -> None:
    """The folder and everything in it; a link in its place is unlinked, never followed
    (an operator's link to a folder elsewhere: that folder is theirs)."""
    if folder.is_symlink():
        os.unlink(folder)
    elif folder.exists():
        shutil.rmtree(folder)


def _remove_sessions(folder: Path, user: str) -> int:
    """The ledger's session files of `user` (named by a hash of user and session: each
    file says whose it is). Returns how many went."""
    if not folder.is_dir():
        return 0
    removed = 0
    needle = json.dumps(user).encode()
    for path in folder.glob("*.json"):
        try:
            data = path.read_bytes()
            if needle not in data or json.loads(data).get("user") != user:
                continue
        except (OSError, ValueError, AttributeError):
            continue  # gone meanwhile, or not a session file: the ledger removes those
        removed += remove_file(path, kind="ledger")
    return removed
