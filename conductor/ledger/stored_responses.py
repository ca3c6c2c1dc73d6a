"""The Responses API's stored responses: a client sends only what is new.

    memory/ledger/responses/<hash of user>/<response id>.json

A file holds one response object, the id of the response it continues (`parent`) and only
the items this request added (`items`): a conversation of thirty turns is thirty files
whose bytes add up to what was said, not thirty copies of the whole (a continuation used
to rewrite the whole context: 10.5 MB for a 120-byte message). The context is read back
by following the parents. Unlike the ledger's session files these are the client's state,
not a cache: written atomically and durably, 0600 in 0700 folders.

Each user keeps at most `max_bytes` (a profile's `memory.responses_store_mib`) and
`MAX_STORED` files, the oldest dropped first (ids sort by their time of creation): a
continuation of a response whose earlier turns were dropped is refused with a reason. A
deleted response leaves a *tombstone* while later responses continue it: its items and
output, without the response object, so `GET` and a continuation of it find nothing but
the conversations built on it still read whole. A user's responses are found under that
user only. What a file holds is what the conversation held: nothing of it is logged.
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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from conductor.storage.atomic import atomic_write, remove_file

log = logging.getLogger("tandem.memory")

MAX_STORED = 1000  # a user's newest responses kept
MAX_BYTES = 64 * 1024 * 1024  # a user's stored responses, in bytes
MAX_CHAIN = 10_000  # parents followed at most (ids only grow older: a guard, not a limit)
FORMAT_VERSION = 2  # 1: each file held its whole context
# resp_ + the creation time in nanoseconds (16 hex digits, so names sort by age) + 128
# random bits (an id is not guessable).
ID_RE = re.compile(r"resp_[0-9a-f]{48}")


def new_response_id() -> str:
    return f"resp_{time.time_ns():016x}{secrets.token_hex(16)}"


class ChainBroken(LookupError):
    """An earlier response of the conversation is no longer stored (dropped for room)."""


@dataclass
class StoredResponse:
    response: dict[str, Any]
    context: list[dict[str, Any]]  # the items before the response's output
    parent: str | None = None  # the response this one continues
    # what this request added to the parent's conversation (None: the whole context)
    items: list[dict[str, Any]] | None = None
    output: list[dict[str, Any]] = field(default_factory=list)  # a tombstone's

    @property
    def conversation(self) -> list[dict[str, Any]]:
        """The items a response chained on this one continues: the context, then the
        output (an empty answer is still a turn: an empty assistant message)."""
        output = self.response.get("output", self.output) if self.response else self.output
        if not output:
            output = [{"type": "message", "role": "assistant",
                       "content": [{"type": "output_text", "text": ""}]}]
        return [*self.context, *output]


class ResponseStore:
    def __init__(self, memory_root: Path, limit: int = MAX_STORED,
                 max_bytes: int = MAX_BYTES) -> None:
        self.folder = memory_root / "ledger" / "responses"
        self.limit = limit
        self.max_bytes = max_bytes
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
        """Write the response: the parent's id and this request's items (or the whole
        context when it continues nothing stored). False (nothing written) when it was
        deleted, or its user was since `generation`."""
        path = self._path(user, stored.response["id"])
        if path is None:
            raise ValueError("not a stored response's id")
        items = stored.items if stored.items is not None else stored.context
        payload = {"version": FORMAT_VERSION, "response": stored.response,
                   "parent": stored.parent, "items": items}
        text = json.dumps(payload, ensure_ascii=False, separators=(",", ":"))
        with self._lock:
            if stored.response["id"] in self._deleted or (
                    generation is not None and generation != self._generation.get(user, 0)):
                return False
            atomic_write(path, text, kind="responses")
            self._evict(path.parent, keep=path.name)
        return True

    def load(self, user: str | None, response_id: str,
             resolve: bool = True) -> StoredResponse | None:
        """The response, with its whole context when `resolve` (else `context` is empty:
        GET needs the object alone); None when it is not stored (or deleted).
        ChainBroken when an earlier response it continues was dropped."""
        found = self._read(user, response_id)
        if found is None or not found.response:
            return None
        if resolve:
            found.context = self._context(user, found)
        return found

    def _context(self, user: str | None, stored: StoredResponse) -> list[dict[str, Any]]:
        """The items before `stored`'s output: each parent's conversation, oldest first."""
        chain = [stored]
        while chain[-1].parent is not None:
            parent = self._read(user, chain[-1].parent)
            if parent is None or len(chain) > MAX_CHAIN:
                raise ChainBroken(chain[-1].parent)
            chain.append(parent)
        context: list[dict[str, Any]] = []
        previous: StoredResponse | None = None
        for link in reversed(chain):  # the first response first
            if previous is not None:  # `context` is the previous link's: add its answer
                context = StoredResponse(previous.response, context,
                                         output=previous.output).conversation
            context = [*context, *(link.items or [])]
            previous = link
        return context

    def _read(self, user: str | None, response_id: str) -> StoredResponse | None:
        path = self._path(user, response_id)
        if path is None:
            return None
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            if data.get("version") == 1:
                return StoredResponse(response=data["response"], context=[],
                                      items=list(data["context"]))
            if data.get("version") != FORMAT_VERSION:
                raise ValueError("another format")
            return StoredResponse(response=data.get("response") or {}, context=[],
                                  parent=data.get("parent"), items=list(data["items"]),
                                  output=list(data.get("output") or []))
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError):
            log.warning("responses: an unreadable stored response skipped")
            return None

    def delete(self, user: str | None, response_id: str) -> bool:
        """Delete the response; while later responses continue it, a tombstone keeps the
        items and output they read (never the response object). A tombstone nothing
        continues any more goes too."""
        path = self._path(user, response_id)
        if path is None:
            return False
        with self._lock:
            self._deleted.add(response_id)
            found = self._read(user, response_id)
            if found is None or not found.response:
                return False
            if self._continued(path.parent, response_id):
                tombstone = {"version": FORMAT_VERSION, "response": None,
                             "parent": found.parent, "items": found.items or [],
                             "output": found.response.get("output", [])}
                atomic_write(path, json.dumps(tombstone, ensure_ascii=False,
                                              separators=(",", ":")), kind="responses")
                return True
            removed = remove_file(path, kind="responses")
            parent = found.parent
            while parent is not None:  # tombstones left with nothing to carry
                above = self._read(user, parent)
                if above is None or above.response or self._continued(path.parent, parent):
                    break
                remove_file(path.parent / f"{parent}.json", kind="responses")
                parent = above.parent
            return removed

    def delete_user(self, user: str | None) -> None:
        """All of a user's responses (the user's delete), and any still being written."""
        with self._lock:
            self._generation[user] = self._generation.get(user, 0) + 1
            shutil.rmtree(self._user_folder(user), ignore_errors=True)

    def stored_bytes(self, user: str | None) -> int:
        folder = self._user_folder(user)
        return sum(p.stat().st_size for p in folder.glob("resp_*.json")) \
            if folder.is_dir() else 0

    def _continued(self, folder: Path, response_id: str) -> bool:
        """Does a later response name `response_id` as its parent? (Only later files can:
        ids sort by age.)"""
        needle = f'"parent":"{response_id}"'
        return any(needle in p.read_text(encoding="utf-8", errors="replace")
                   for p in folder.glob("resp_*.json") if p.name > f"{response_id}.json")

    def _evict(self, folder: Path, keep: str) -> None:
        """The oldest files go until the user is within both bounds (never `keep`, the
        file just written)."""
        files = sorted((p.name, p.stat().st_size) for p in folder.glob("resp_*.json"))
        total = sum(size for _, size in files)
        count = len(files)
        for name, size in files:
            if count <= self.limit and total <= self.max_bytes:
                break
            if name == keep:
                continue
            remove_file(folder / name, kind="responses")
            total, count = total - size, count - 1
