"""The admin password: `$TANDEM_HOME/admin.json`, an scrypt hash with a salt of its own.

`tandem admin password` sets it (the text is stored nowhere); the server reloads the file
when it changes, so setting, changing or clearing the password takes effect at the next
request, and every screen session signed in under the old one ends. A verified password
is remembered for its file version (scrypt costs tens of milliseconds), so a script's
bearer pays for it once.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import threading
from datetime import UTC, datetime
from pathlib import Path

from conductor.memory.types import atomic_write, remove_file

ADMIN_FILE = "admin.json"
# scrypt as the API keys use it (OWASP's N=2^15, r=8, p=1: 32 MiB, ~50 ms here)
SCRYPT = {"n": 2**15, "r": 8, "p": 1, "maxmem": 64 * 1024 * 1024}
MIN_LENGTH = 8


class AdminPasswordError(ValueError):
    """A password that cannot be set (too short), said to the operator."""


def _hash(password: str, salt: bytes) -> bytes:
    return hashlib.scrypt(password.encode(), salt=salt, **SCRYPT)


class AdminPassword:
    """One password for the admin routes and the Memory screen, or none."""

    def __init__(self, home: Path) -> None:
        self.path = Path(home) / ADMIN_FILE
        self._lock = threading.Lock()
        self._stamp: tuple[int, int] | None = None
        self._entry: dict | None = None
        self._verified: bytes | None = None  # sha256 of the password this version took

    # -- the command's side -------------------------------------------------------------
    def set(self, password: str) -> None:
        if len(password) < MIN_LENGTH:
            raise AdminPasswordError(f"an admin password needs at least {MIN_LENGTH} "
                                     "characters")
        salt = secrets.token_bytes(16)
        entry = {"salt": salt.hex(), "hash": _hash(password, salt).hex(),
                 "set_at": datetime.now(UTC).isoformat(timespec="seconds")}
        atomic_write(self.path, json.dumps(entry, indent=1) + "\n")  # 0600 by default

    def clear(self) -> bool:
        """Remove the password (the screen is then open on loopback only); False if none."""
        if not self.path.exists():
            return False
        remove_file(self.path)
        return True

    # -- the server's side --------------------------------------------------------------
    def is_set(self) -> bool:
        with self._lock:
            self._refresh()
            return self._entry is not None

    def version(self) -> str | None:
        """What changes when the password does: screen sessions are bound to it."""
        with self._lock:
            self._refresh()
            return self._entry["hash"] if self._entry else None

    def known(self, password: str) -> bool:
        """Whether `password` is the one this version already verified (no scrypt)."""
        digest = hashlib.sha256(password.encode()).digest()
        with self._lock:
            self._refresh()
            known = self._verified
        return known is not None and hmac.compare_digest(digest, known)

    def verify(self, password: str) -> bool:
        digest = hashlib.sha256(password.encode()).digest()
        with self._lock:
            self._refresh()
            entry, known = self._entry, self._verified
        if entry is None or not entry["hash"]:
            return False
        if known is not None and hmac.compare_digest(digest, known):
            return True
        # scrypt outside the lock: a guess never holds up a request already verified
        ok = hmac.compare_digest(_hash(password, bytes.fromhex(entry["salt"])),
                                 bytes.fromhex(entry["hash"]))
        if ok:
            with self._lock:
                if self._entry is entry:
                    self._verified = digest
        return ok

    def _refresh(self) -> None:
        try:
            stat = self.path.stat()
        except FileNotFoundError:
            self._stamp, self._entry, self._verified = None, None, None
            return
        stamp = (stat.st_mtime_ns, stat.st_size)
        if stamp == self._stamp:
            return
        self._stamp, self._verified = stamp, None
        try:
            entry = json.loads(self.path.read_text())
            bytes.fromhex(entry["salt"])
            bytes.fromhex(entry["hash"])
        except (OSError, ValueError, KeyError, TypeError):
            # A file that cannot be read locks the door rather than opening it.
            entry = {"salt": "", "hash": ""}
        self._entry = entry
