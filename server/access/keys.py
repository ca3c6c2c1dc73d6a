"""Named API keys: one key a person, its label is that person's user name.

`$TANDEM_HOME/keys.json` holds, per label, a key id (in the clear: it finds the entry) and
an scrypt hash of the secret with a salt of its own; the key's text is printed once by
`tandem keys add` and stored nowhere. A key reads `tdm-<id>-<secret>`.

The server and the `tandem keys` command are separate processes: the server reloads the
file whenever it changes, so a revoked key stops working at its next request, without a
restart. A verified key is remembered in memory (scrypt costs tens of milliseconds: once
a key, not once a request), and forgotten when the file changes. scrypt runs outside the
store's lock, so a guess never holds up a key already verified, and a key id that failed
`MAX_FAILURES` times in `FAILURE_WINDOW_S` from one address is refused from that address
without scrypt until the window passes (a verified key keeps working, and a guesser
elsewhere cannot lock its owner out). Attempts are counted before scrypt runs, and the
same key sent many times at once is checked once (`server.access.attempts`).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import threading
import time
from concurrent.futures import TimeoutError as WaitedTooLong
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

from conductor.memory.types import UserNameError, atomic_write, user_folder, valid_user
from server.access.attempts import Attempts

KEYS_FILE = "keys.json"
PREFIX = "tdm"
# scrypt, as OWASP suggests for it: N=2^15, r=8, p=1 (32 MiB, ~50 ms here).
SCRYPT = {"n": 2**15, "r": 8, "p": 1, "maxmem": 64 * 1024 * 1024}
MAX_FAILURES = 5
FAILURE_WINDOW_S = 60.0
MAX_TRACKED = 4096  # (key id, address) pairs with recent failures kept at most
SHARED_CHECK_WAIT_S = 30.0  # a request waiting for the same key's check in flight
# `has_keys` runs on the event loop for every request of a server with no --api-key: the
# file is statted at most this often there (a stat a request held the loop under load).
# A key's check (`label_for`, in a worker thread) stats it every time.
HAS_KEYS_STAT_S = 1.0


class KeysError(ValueError):
    """A `tandem keys` request that cannot be done (bad label, duplicate, unknown)."""


def label_folder(label: str) -> str | None:
    """The folder of the user a key's label names (`user_folder`, as a request with the
    key is filed), or None for a label that names no one (a hand-edited file's)."""
    try:
        return user_folder(label)
    except UserNameError:
        return None


def same_user(a: str, b: str) -> bool:
    """Whether two names are one user: one folder (`José`, `josé` and its decomposed
    spelling are one), never for a name that is no one's."""
    folder = label_folder(a)
    return folder is not None and folder == label_folder(b)


@dataclass(frozen=True)
class KeyEntry:
    label: str
    key_id: str
    salt: str  # hex
    hash: str  # hex: scrypt(secret, salt)
    created: str


def _hash(secret: str, salt: bytes) -> bytes:
    return hashlib.scrypt(secret.encode(), salt=salt, **SCRYPT)


def folder_form(label: str) -> bool:
    """Whether `label`, in any case, is a folder of the form user_folder files a hashed
    name under (`jose--<16 hex>`): the form server.access.admin.user_named takes as that
    folder as it is, so a key so labelled (filed under a hash of the label) would be one
    user to the chat routes and another to the admin routes."""
    folder = label.lower()
    return valid_user(folder) and user_folder(folder) != folder


class KeyStore:
    def __init__(self, home: Path) -> None:
        self.path = Path(home) / KEYS_FILE
        self._lock = threading.Lock()
        self._stamp: tuple[int, int] | None = None
        self._statted_at = float("-inf")  # self.clock() at the last stat of the file
        self._entries: dict[str, KeyEntry] = {}  # key id -> entry
        self._verified: dict[bytes, str] = {}  # sha256(key) -> label, this file version
        self.clock = time.monotonic  # for the failure window (tests move it)
        # (key id, peer) -> recent failures and checks in flight
        self.attempts = Attempts(MAX_FAILURES, FAILURE_WINDOW_S, MAX_TRACKED,
                                 clock=lambda: self.clock())

    # -- the command's side -------------------------------------------------------------
    def add(self, label: str) -> str:
        """A new key for `label`; returns its text, which is stored nowhere."""
        # The label is the user's name, any a request may give (josé, o'brien, 山田);
        # the folder it files under is derived wherever files are opened.
        try:
            folder = user_folder(label)
        except UserNameError as exc:
            raise KeysError(f"label {label!r}: {exc} (a key's label is its user's "
                            "name)") from None
        if folder_form(label):
            raise KeysError(f"label {label!r} has the form of a hashed user folder "
                            "(<name>--<16 hex digits>), which the admin routes' ?user= and "
                            "a user's delete take as that folder, not as this name: choose "
                            "another label")
        entries = self._read()
        if any(label_folder(e.label) == folder for e in entries.values()):
            raise KeysError(f"a key labelled {label!r} exists (user names are one user "
                            "whatever their case or spelling); revoke it first")
        key_id, secret, salt = secrets.token_hex(4), secrets.token_urlsafe(24), os.urandom(16)
        entries[key_id] = KeyEntry(label, key_id, salt.hex(), _hash(secret, salt).hex(),
                                   datetime.now(UTC).isoformat(timespec="seconds"))
        self._write(entries)
        return f"{PREFIX}-{key_id}-{secret}"

    def revoke(self, label: str) -> None:
        """Revoke the key labelled `label`, or one whose label is the same user's name in
        another case or spelling."""
        entries = self._read()
        kept = {i: e for i, e in entries.items()
                if e.label != label and not same_user(e.label, label)}
        if len(kept) == len(entries):
            raise KeysError(f"no key labelled {label!r}")
        self._write(kept)

    def revoke_user(self, user: str) -> int:
        """Revoke every key of the user whose folder is `user`, as the admin routes resolve
        it (the keys labelled josé, José ...: folder `user_folder("josé")`); returns how
        many (0: none, no error). The user's delete calls this."""
        entries = self._read()
        kept = {i: e for i, e in entries.items() if label_folder(e.label) != user}
        if len(kept) != len(entries):
            self._write(kept)
        return len(entries) - len(kept)

    def list(self) -> list[KeyEntry]:
        return sorted(self._read().values(), key=lambda e: e.label)

    # -- the server's side --------------------------------------------------------------
    def has_keys(self) -> bool:
        """Whether any named key exists. On the event loop, every request: a key added by
        another process (`tandem keys add`) is seen within HAS_KEYS_STAT_S; one added or
        revoked by this object at once; a revoked key fails its next check regardless
        (`label_for` stats the file every time)."""
        with self._lock:
            if self.clock() - self._statted_at >= HAS_KEYS_STAT_S:
                self._refresh()
            return bool(self._entries)

    def label_for(self, key: str, peer: str | None = None) -> str | None:
        """The label of a valid key, or None. `peer`: the address asking (failures are
        counted per key id and address)."""
        digest = hashlib.sha256(key.encode()).digest()
        parts = key.split("-", 2)
        with self._lock:
            self._refresh()
            if digest in self._verified:
                return self._verified[digest]
            if len(parts) != 3 or parts[0] != PREFIX:
                return None
            entry = self._entries.get(parts[1])
            if entry is None:
                return None
            stamp = self._stamp
            # counted before scrypt runs, so guesses sent at once cannot all run it; under
            # the lock, so a check of this key that ends meanwhile left it in `_verified`
            check = self.attempts.begin((entry.key_id, peer), digest)
        if check is None:
            return None
        if not check.leader:  # the same key is being checked: its answer is this one's
            try:
                return check.answer.result(timeout=SHARED_CHECK_WAIT_S)
            except WaitedTooLong:
                return None
        label = None
        try:
            label = self._check(entry, parts[2], digest, stamp)
        finally:
            self.attempts.end(check, label)
        return label

    def _check(self, entry: KeyEntry, secret: str, digest: bytes,
               stamp: tuple[int, int] | None) -> str | None:
        """scrypt (tens of milliseconds) with the lock released: a wrong guess never makes
        a verified key wait behind it."""
        valid = hmac.compare_digest(_hash(secret, bytes.fromhex(entry.salt)).hex(),
                                    entry.hash)
        if not valid:
            return None
        with self._lock:
            if self._stamp == stamp:  # not revoked while it was checked
                self._verified[digest] = entry.label
                return entry.label
            self._refresh()
            still = self._entries.get(entry.key_id)
            return entry.label if still is not None and still.hash == entry.hash else None

    def _refresh(self) -> None:
        self._statted_at = self.clock()
        try:
            stat = self.path.stat()
            stamp = (stat.st_mtime_ns, stat.st_ino)
        except FileNotFoundError:
            stamp = None
        if stamp != self._stamp:
            self._entries = self._read() if stamp is not None else {}
            self._verified.clear()
            self._stamp = stamp

    # -- the file -----------------------------------------------------------------------
    def _read(self) -> dict[str, KeyEntry]:
        try:
            data = json.loads(self.path.read_text())
        except FileNotFoundError:
            return {}
        except ValueError as exc:
            raise KeysError(f"{self.path} is not valid JSON: {exc}") from None
        return {e["key_id"]: KeyEntry(**e) for e in data.get("keys", [])}

    def _write(self, entries: dict[str, KeyEntry]) -> None:
        payload = {"keys": [asdict(e) for e in sorted(entries.values(), key=lambda e: e.label)]}
        atomic_write(self.path, json.dumps(payload, indent=2) + "\n", mode=0o600)
        with self._lock:
            self._statted_at = float("-inf")  # this object's own change: seen at once
