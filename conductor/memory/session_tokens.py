"""Session tokens for the memory routes that outlive a restart.

A session's token sits in its card (hidden context) and in whatever script a user wrote
against the memory routes. Both must still work after a restart: the same token for the
same session (or the card would change and the conversation's prompt with it) and the
token still accepted.

A token is derived, not drawn: HMAC-SHA256 of the user and session under a key the server
makes once (``memory/session-token.key``, 32 random bytes, 0600), cut to 128 bits. To go
back from a token to its session, the sessions that were given one are listed, names only,
in ``memory/session-tokens.jsonl`` (no token is ever written down).

A user's delete revokes their tokens: their sessions leave the list, and the user's
*epoch* moves on (``memory/session-epochs.json``, under a keyed hash of the name, so the
file names no one): from then on a user of that name is derived with the new epoch, so
neither the old tokens nor the old prefix-cache salt come back, after a restart too.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
import os
import secrets
import threading
from contextlib import suppress
from pathlib import Path

from conductor.storage.atomic import FILE_MODE, append_line, atomic_write, ensure_dir

log = logging.getLogger("tandem.memory")

KEY_FILE = "session-token.key"
SESSIONS_FILE = "session-tokens.jsonl"
EPOCHS_FILE = "session-epochs.json"
KEY_BYTES = 32
# Sessions a user keeps a resolvable token for (a client that sends no session id makes a
# new one each conversation): the least recently given one goes first, and resolves again
# from its next chat turn on. The list on disk is rewritten once it holds twice as many
# lines as there are sessions listed.
MAX_SESSIONS_PER_USER = 1024


def _load_or_make_key(path: Path) -> bytes:
    """The key, made once: O_EXCL so two processes starting at once agree on one."""
    ensure_dir(path.parent)
    with suppress(FileExistsError):
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
        try:
            os.write(fd, secrets.token_bytes(KEY_BYTES))
            os.fsync(fd)
        finally:
            os.close(fd)
    key = path.read_bytes()
    if len(key) != KEY_BYTES:  # a crash between create and write: the file is empty
        raise OSError(f"{path} is not a session-token key; remove it to make a new one "
                      "(tokens given out before then stop working)")
    return key


class SessionTokens:
    """token_for(user, session) -> token; resolve(token) -> (user, session)."""

    def __init__(self, memory_root: Path) -> None:
        self._key_path = memory_root / KEY_FILE
        self._list_path = memory_root / SESSIONS_FILE
        self._epochs_path = memory_root / EPOCHS_FILE
        self._epochs: dict[str, int] = {}  # keyed hash of a deleted user's name -> epoch
        self._writing = threading.Lock()  # the list's writes: a save's and a delete's
        self._key: bytes | None = None  # made on the first token: a server never asked
        self._by_token: dict[str, tuple[str, str]] = {}  # has no key file
        self._known: dict[str, dict[str, None]] = {}  # user -> sessions, oldest first
        self._lines_on_disk = 0
        self._lock = threading.Lock()
        self._loaded = False
        self._unsaved: list[tuple[str, str]] = []

    def token_for(self, user: str, session: str) -> str:
        with self._lock:
            self._load()
            token = self._derive(user, session)
            sessions = self._known.setdefault(user, {})
            if session not in sessions:
                self._by_token[token] = (user, session)
                self._unsaved.append((user, session))
            sessions.pop(session, None)
            sessions[session] = None  # most recently given last
            while len(sessions) > MAX_SESSIONS_PER_USER:
                oldest = next(iter(sessions))
                del sessions[oldest]
                self._by_token.pop(self._derive(user, oldest), None)
            return token

    def save(self) -> None:
        """List the sessions given a token since the last save (the ledger saver's thread
        calls this, off the request path). A crash loses at most the last second's: such
        a session's token is the same after a restart and resolves again from its next
        turn on."""
        with self._writing:
            with self._lock:
                unsaved, self._unsaved = self._unsaved, []
            if not unsaved:
                return
            with self._lock:
                listed = sum(len(s) for s in self._known.values())
                rewrite = self._lines_on_disk + len(unsaved) > 2 * max(listed, 64)
                if rewrite:  # the whole list, as it is now: the dropped sessions go
                    unsaved = self._listed()
            try:
                if rewrite:
                    self._write_list(unsaved)
                else:
                    append_line(self._list_path, _lines(unsaved), kind="session_tokens")
                    self._lines_on_disk += len(unsaved)
            except OSError as exc:  # disk full, read-only: valid until a restart
                log.warning("%d session tokens not listed on disk (%s): they resolve until "
                            "the server restarts", len(unsaved), exc.strerror or exc)

    def forget_user(self, user: str) -> int:
        """The user's delete: every token of theirs stops resolving, and the tokens and
        prefix-cache salt a user of that name is given from now on are new ones (their
        epoch moves on, on disk first: a crash after it leaves the old tokens dead).
        Returns the sessions that had a token. OSError when the files cannot be written."""
        with self._writing:
            with self._lock:
                self._load()
                sessions = self._known.pop(user, {})
                for session in sessions:
                    self._by_token.pop(self._derive(user, session), None)
                self._unsaved = [(u, s) for u, s in self._unsaved if u != user]
                name = self._epoch_name(user)
                self._epochs[name] = self._epochs.get(name, 0) + 1
                epochs, listed = dict(self._epochs), self._listed()
            atomic_write(self._epochs_path, json.dumps(epochs, sort_keys=True) + "\n",
                         kind="session_tokens")
            self._write_list(listed)
        return len(sessions)

    def _listed(self) -> list[tuple[str, str]]:
        """Every session with a token now (under the lock)."""
        return [(u, s) for u, sessions in self._known.items() for s in sessions]

    def _write_list(self, listed: list[tuple[str, str]]) -> None:
        atomic_write(self._list_path, _lines(listed) + "\n" if listed else "",
                     kind="session_tokens")
        self._lines_on_disk = len(listed)

    def resolve(self, token: str | None) -> tuple[str, str] | None:
        if not token:
            return None
        with self._lock:
            self._load()
            found = self._by_token.get(token)
        # the lookup found it by hash; compare the token itself in constant time
        if found is None or not hmac.compare_digest(token, self._derive(*found)):
            return None
        return found

    def cache_salt(self, user: str) -> str:
        """The user's prefix-cache salt: derived under the same key, never from anything
        a client sends, the same after a restart (the cache itself is not)."""
        with self._lock:  # the key may be made here: one thread makes it
            self._load()  # the user's epoch
            return self._derive(user, "\0prefix-cache")

    def _epoch_name(self, user: str) -> str:
        """The user in the epochs file: a keyed hash, so the file names no one."""
        return self._mac(f"\0epoch\0{user}").hex()

    def _mac(self, text: str) -> bytes:
        if self._key is None:
            try:
                self._key = _load_or_make_key(self._key_path)
            except OSError as exc:
                log.warning("no session-token key on disk (%s): tokens last until the "
                            "server restarts", exc.strerror or exc)
                self._key = secrets.token_bytes(KEY_BYTES)
        return hmac.new(self._key, text.encode("utf-8", "surrogatepass"),
                        hashlib.sha256).digest()[:16]

    def _derive(self, user: str, session: str) -> str:
        # A user never deleted is epoch 0, derived as before epochs were: their tokens and
        # cache salt stay what they were. A name holds no "#" and no NUL.
        epoch = self._epochs.get(self._epoch_name(user), 0) if self._epochs else 0
        name = f"{user}#{epoch}" if epoch else user
        mac = self._mac(f"{name}\0{session}")
        return base64.urlsafe_b64encode(mac).rstrip(b"=").decode("ascii")

    def _load(self) -> None:
        """The sessions given a token before this process started (read once)."""
        if self._loaded:
            return
        self._loaded = True
        try:
            epochs = json.loads(self._epochs_path.read_text(encoding="utf-8"))
            self._epochs = {str(k): int(v) for k, v in epochs.items()}
        except FileNotFoundError:
            pass
        except (OSError, ValueError, AttributeError, TypeError) as exc:
            # Written whole, so only a hand can spoil it. The deleted users' sessions are
            # off the list, so their old tokens still resolve to no one; a user made again
            # under a deleted name would get the old salt back, so say so.
            log.warning("%s cannot be read (%s): users made again under a deleted name "
                        "share the old prefix-cache salt", EPOCHS_FILE,
                        type(exc).__name__)
        try:
            lines = self._list_path.read_text(encoding="utf-8", errors="replace").splitlines()
        except FileNotFoundError:
            return
        for line in lines:
            try:
                entry = json.loads(line)
                key = (str(entry["user"]), str(entry["session"]))
            except (ValueError, KeyError, TypeError):  # a torn last line: skipped
                continue
            self._lines_on_disk += 1
            sessions = self._known.setdefault(key[0], {})
            sessions.pop(key[1], None)
            sessions[key[1]] = None
            self._by_token[self._derive(*key)] = key
            while len(sessions) > MAX_SESSIONS_PER_USER:
                oldest = next(iter(sessions))
                del sessions[oldest]
                self._by_token.pop(self._derive(key[0], oldest), None)


def _lines(pairs: list[tuple[str, str]]) -> str:
    return "\n".join(json.dumps({"user": u, "session": s}) for u, s in pairs)
