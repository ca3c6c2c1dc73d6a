"""Where the memory files live: the folder layout under ``$TANDEM_HOME/memory``.

memory/
  journal.jsonl                 append-only journal, every user
  locks/<user>.lock             the write lock of one user's tree
  index/<user>/                 tantivy index (derived, rebuilt from the files)
  notes/<user>/
    user/<kind>-<slug>--<id>.md
    projects/<name>-<hash8>/<kind>-<slug>--<id>.md
    sessions/<session>/<kind>-<slug>--<id>.md
    revisions/<id>/<n>.md       every earlier text of a note
    archive/<yyyy-mm>/<scope path>/<kind>-<slug>--<id>.md
    INDEX.md, usage.json
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import unicodedata
from dataclasses import dataclass
from pathlib import Path

USER_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@+-]{0,63}")
SESSION_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
SLUG_MAX = 48
# A user's name to their folder (`user_folder`): at most this many characters; any other
# name is filed under a slug of this length and a hash of this many hex digits.
MAX_NAME_CHARS = 128
NAME_SLUG_CHARS = 24
NAME_HASH_HEX = 16
# The mapped form; a plain name of this shape is mapped as well (see `user_folder`).
MAPPED_RE = re.compile(rf".*--[0-9a-f]{{{NAME_HASH_HEX}}}")
ALLOWED_NAMES = ("letters, digits and . _ @ + - (up to 64) keep their name as the folder; "
                 f"any other name of up to {MAX_NAME_CHARS} characters without control "
                 "characters is filed under a slug and a hash of it")


class StoreRootError(ValueError):
    """The memory root cannot be used (for example it lies inside a git work tree)."""


def default_home() -> Path:
    """``$TANDEM_HOME``, or ``~/.tandem`` when it is unset."""
    return Path(os.environ.get("TANDEM_HOME") or "~/.tandem").expanduser()


def default_memory_root(home: Path | None = None) -> Path:
    """The memory root: ``<home>/memory``."""
    return (home if home is not None else default_home()) / "memory"


def index_home(root: Path) -> Path:
    """Where the derived search indexes of a memory root live: ``root`` itself, or with
    replicas sharing one notes root, ``$TANDEM_INDEX_DIR`` (each replica's own folder:
    tantivy and embedded Qdrant lock theirs per process; the indexes are rebuilt from the
    files)."""
    folder = os.environ.get("TANDEM_INDEX_DIR")
    return Path(folder) if folder else root


class UserNameError(ValueError):
    """A name that cannot be anyone's: the message says why, and what is accepted."""


def valid_user(user: str) -> bool:
    """A folder name a user's tree may have (what `user_folder` gives)."""
    return isinstance(user, str) and USER_RE.fullmatch(user) is not None


@functools.lru_cache(maxsize=4096)  # every request's user: a handful of names, over and over
def user_folder(name: str) -> str:
    """The folder (and user id everywhere in memory) of the user `name`, for the server
    (a key's label, a trusted proxy's X-Tandem-User) and the CLI's --user alike;
    UserNameError when it names no one (not memoised: an exception is not cached).

    A name the store can file under as it is (letters, digits and ``. _ @ + -``, at most
    64, lower-cased: `Alice` and `alice` are one user) keeps that folder, so no existing
    user's folder changes. Any other name of reasonable length (`josé`, `o'brien`, `山田`)
    is filed under a readable ASCII slug and a hash of the whole name: ``jose--<16 hex>``.
    That form is reserved: a name that already looks like it is hashed too, so two
    different names never share a folder, nor the prefix-cache salt derived from it,
    whichever way they are spelled. Refused, with a reason a proxy's author or a person
    at a terminal can act on: an empty name, a longer one, or one holding control
    characters."""
    if not name or not name.strip():
        raise UserNameError(f"the user name is empty ({ALLOWED_NAMES})")
    if len(name) > MAX_NAME_CHARS:
        raise UserNameError(f"the user name is longer than {MAX_NAME_CHARS} characters")
    if any(unicodedata.category(c) == "Cc" for c in name):
        raise UserNameError(f"the user name holds a control character ({ALLOWED_NAMES})")
    # One spelling of one name: composed or decomposed accents, any case
    exact = unicodedata.normalize("NFC", name).lower()
    if valid_user(exact) and MAPPED_RE.fullmatch(exact) is None:
        return exact
    digest = hashlib.blake2b(exact.encode("utf-8"), digest_size=NAME_HASH_HEX // 2).hexdigest()
    return f"{_name_slug(exact)}--{digest}"


def _name_slug(name: str) -> str:
    """The name's readable part in the characters a folder name may hold."""
    folded = unicodedata.normalize("NFKD", name).encode("ascii", "ignore").decode("ascii")
    slug = re.sub(r"[^a-z0-9._@+]+", "-", folded).strip("-._@+")[:NAME_SLUG_CHARS]
    return slug.rstrip("-._@+") or "user"


def valid_session(session: str) -> bool:
    return isinstance(session, str) and SESSION_RE.fullmatch(session) is not None


def slugify(text: str, limit: int = SLUG_MAX) -> str:
    """Lower-case ASCII words joined by hyphens, at most ``limit`` characters."""
    folded = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    words = re.findall(r"[a-z0-9]+", folded.lower())
    slug = ""
    for word in words:
        candidate = f"{slug}-{word}" if slug else word
        if len(candidate) > limit:
            break
        slug = candidate
    return slug or (words[0][:limit] if words else "note")


def project_key(project: str | os.PathLike[str]) -> tuple[str, str]:
    """``(key, absolute path)`` of a working directory: ``<base name>-<hash8>``.

    The hash is over the absolute path, so two checkouts with one base name stay apart.
    """
    absolute = os.path.abspath(os.path.expanduser(os.fspath(project)))
    digest = hashlib.sha256(absolute.encode("utf-8")).hexdigest()[:8]
    name = slugify(os.path.basename(absolute.rstrip("/")) or "root", limit=40)
    return f"{name}-{digest}", absolute


def git_work_tree_of(path: Path) -> Path | None:
    """The top of the git work tree that ``path`` lies in, or None.

    Notes hold personal facts; a root inside a repository would get them committed.
    """
    probe = Path(os.path.abspath(path))
    # Resolve symlinks on the part of the path that exists.
    existing = probe
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    resolved = Path(os.path.realpath(existing)) / probe.relative_to(existing)
    for folder in (resolved, *resolved.parents):
        if (folder / ".git").exists():
            return folder
    return None


@dataclass(frozen=True)
class Layout:
    """Paths of one user's tree under a memory root."""

    root: Path
    user: str

    @property
    def user_dir(self) -> Path:
        return self.root / "notes" / self.user

    @property
    def archive_dir(self) -> Path:
        return self.user_dir / "archive"

    @property
    def revisions_dir(self) -> Path:
        return self.user_dir / "revisions"

    @property
    def index_md(self) -> Path:
        return self.user_dir / "INDEX.md"

    @property
    def usage_json(self) -> Path:
        return self.user_dir / "usage.json"

    @property
    def lock_path(self) -> Path:
        return self.root / "locks" / f"{self.user}.lock"

    @property
    def index_dir(self) -> Path:
        return index_home(self.root) / "index" / self.user

    @property
    def journal_path(self) -> Path:
        return self.root / "journal.jsonl"

    def scope_dir(self, scope: str, key: str | None) -> Path:
        """The live folder of a scope: ``user/``, ``projects/<key>/``, ``sessions/<key>/``."""
        if scope == "user":
            return self.user_dir / "user"
        if scope == "project":
            return self.user_dir / "projects" / str(key)
        return self.user_dir / "sessions" / str(key)

    def revision_path(self, note_id: str, revision: int) -> Path:
        return self.revisions_dir / note_id / f"{revision}.md"


def users_under(root: Path) -> list[str]:
    """The users that have a tree under a memory root."""
    notes = root / "notes"
    if not notes.is_dir():
        return []
    return sorted(p.name for p in notes.iterdir() if p.is_dir() and valid_user(p.name))
