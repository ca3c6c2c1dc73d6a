"""A user's name as a request gives it, to the one folder (and prefix-cache salt) that is
theirs.

A name the store can file under as it is (letters, digits and ``. _ @ + -``, at most 64,
lower-cased: `Alice` and `alice` are one user) keeps that folder, so no existing user's
folder changes. Any other name of reasonable length (`josé`, `o'brien`, `山田`) is filed
under a readable ASCII slug and a hash of the whole name: ``jose--<16 hex>``. That form is
reserved: a name that already looks like it is hashed too, so two different names never
share a folder, and the salt derived from the folder, whichever way they are spelled.
Refused, with a reason a proxy's author can act on: an empty name, a longer one, or one
holding control characters.
"""

from __future__ import annotations

import functools
import hashlib
import re
import unicodedata

from conductor.memory.types import valid_user

MAX_NAME_CHARS = 128
SLUG_CHARS = 24
HASH_HEX = 16
# The mapped form; a plain name of this shape is mapped as well (see above).
MAPPED_RE = re.compile(rf".*--[0-9a-f]{{{HASH_HEX}}}")
ALLOWED = "letters, digits and . _ @ + - (up to 64) keep their name as the folder; " \
    f"any other name of up to {MAX_NAME_CHARS} characters without control characters " \
    "is filed under a slug and a hash of it"


class UserNameError(ValueError):
    """A name that cannot be anyone's: the message says why, and what is accepted."""


def header_text(value: str) -> str:
    """A header's value as its sender wrote it: HTTP servers hand header bytes over as
    Latin-1, and clients send a name such as `josé` as UTF-8 bytes."""
    try:
        return value.encode("latin-1").decode("utf-8")
    except (UnicodeEncodeError, UnicodeDecodeError):
        return value


@functools.lru_cache(maxsize=4096)  # every request's user: a handful of names, over and over
def user_folder(name: str) -> str:
    """The folder (and user id everywhere in memory) of the user `name`; UserNameError
    when it names no one (not memoised: an exception is not cached)."""
    if not name or not name.strip():
        raise UserNameError(f"the user name is empty ({ALLOWED})")
    if len(name) > MAX_NAME_CHARS:
        raise UserNameError(f"the user name is longer than {MAX_NAME_CHARS} characters")
    if any(unicodedata.category(c) == "Cc" for c in name):
        raise UserNameError(f"the user name holds a control character ({ALLOWED})")
    # One spelling of one name: composed or decomposed accents, any case
    exact = unicodedata.normalize("NFC", name).lower()
    if valid_user(exact) and MAPPED_RE.fullmatch(exact) is None:
        return exact
    digest = hashlib.blake2b(exact.encode("utf-8"), digest_size=HASH_HEX // 2).hexdigest()
    return f"{_slug(exact)}--{digest}"


def _slug(name: str) -> str:
    """The name's readable part in the characters a folder name may hold."""
    folded = unicodedata.normalize("NFKD", name).encode("ascii", "ignore").decode("ascii")
    slug = re.sub(r"[^a-z0-9._@+]+", "-", folded).strip("-._@+")[:SLUG_CHARS].rstrip("-._@+")
    return slug or "user"
