"""The Responses API's stored responses: a client sends only what is new.

    memory/ledger/responses/<hash of user>/<response id>.json

A file holds one response object and its context: the items of the conversation before
its output (every earlier turn's input and output, and this request's input), so a
`previous_response_id` is one file read, whatever has been evicted since. Unlike the
ledger's session files these are the client's state, not a cache: written atomically and
durably, 0600 in 0700 folders. A user keeps the newest `MAX_STORED` (ids sort by their
time of creation); a user's responses are found under that user only, so another user's
id is not found. What a file holds is what the conversation held: nothing of it is logged.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import secrets
import shutil
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from conductor.storage.atomic import atomic_write, remove_file

log = logging.getLogger("tandem.memory")

MAX_STORED = 1000  # a user's newest responses kept
FORMAT_VERSION = 1
# resp_ + the creation time in nanoseconds (16 hex digits, so names sort by age) + 128
# random bits (an id is not guessable).
ID_RE = re.compile(r"resp_[0-9a-f]{48}")


def new_response_id() -> str:
    return f"resp_{time.time_ns():016x}{secrets.token_hex(16)}"


@dataclass
class StoredResponse:
    response: dict[str, Any]
    context: list[dict[str, Any]]  # the items before the response's output

    @property
    def conversation(self) -> list[dict[str, Any]]:
        """The items a response chained on this one continues: the context, then the
        output."""
        return [*self.context, *self.response.get("output", [])]


class ResponseStore:
    def __init__(self, memory_root: Path, limit: int = MAX_STORED) -> None:
        self.folder = memory_root / "ledger" / "responses"
        self.limit = limit
        self._lock = threading.Lock()  # a save and its eviction at a time
        # What was deleted stays deleted: a response still running when its id or its
        # user was deleted must not write its file again (`save` checks both).
        self._deleted: set[str] = set()
        self._generation: dict[str | None, int] = {}

    def generation(self, user: str | None) -> int:
        """The user's deletions so far: a save made for an older generation is dropped."""
        with self._lock:
            return self._generation.get(user, 0)

    def _user_folder(self, user: str | None) -> Path:
        name = hashlib.blake2b(f"{user}".encode("utf-8", "surrogatepass"),
                               digest_size=16).hexdigest()
        return self.folder / name

    def _path(self, user: str | None, response_id: str) -> Path | None:
        if not isinstance(response_id, str) or ID_RE.fullmatch(response_id) is None:
            return None  # not an id this store makes: never a path
        return self._user_folder(user) / f"{response_id}.json"

    def save(self, user: str | None, stored: StoredResponse,
             generation: int | None = None) -> bool:
        """Write the response whole; False (nothing written) when it was deleted, or its
        user was since `generation`."""
        path = self._path(user, stored.response["id"])
        if path is None:
            raise ValueError("not a stored response's id")
        payload = {"version": FORMAT_VERSION, "response": stored.response,
                   "context": stored.context}
        with self._lock:
            if stored.response["id"] in self._deleted or (
                    generation is not None and generation != self._generation.get(user, 0)):
                return False
            atomic_write(path, json.dumps(payload, ensure_ascii=False, separators=(",", ":")),
                         kind="responses")
            self._evict(path.parent)
        return True

    def load(self, user: str | None, response_id: str) -> StoredResponse | None:
        path = self._path(user, response_id)
        if path is None:
            return None
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            if data.get("version") != FORMAT_VERSION:
                raise ValueError("another format")
            return StoredResponse(response=data["response"], context=list(data["context"]))
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError):
            log.warning("responses: an unreadable stored response skipped")
            return None

    def delete(self, user: str | None, response_id: str) -> bool:
        path = self._path(user, response_id)
        if path is None:
            return False
        with self._lock:
            self._deleted.add(response_id)
            return remove_file(path, kind="responses")

    def delete_user(self, user: str | None) -> None:
        """All of a user's responses (the user's delete), and any still being written."""
        with self._lock:
            self._generation[user] = self._generation.get(user, 0) + 1
            shutil.rmtree(self._user_folder(user), ignore_errors=True)

    def _evict(self, folder: Path) -> None:
        names = sorted(p.name for p in folder.glob("resp_*.json"))
        for name in names[: max(0, len(names) - self.limit)]:
            remove_file(folder / name, kind="responses")
