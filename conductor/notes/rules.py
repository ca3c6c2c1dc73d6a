"""The rules a note must pass before it is written: caps, kinds, scopes, secrets, and who
may write a rule about the user. Rules are code, not prompt text. And what a write
returns (``WriteResult``): refused with its reason, or done, never raised.

A write that breaks a rule is refused whole (never cut) with a machine-readable reason.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from conductor.notes.note_format import (
    KINDS,
    SCOPES,
    Note,
    clean_tags,
    clean_title,
    normalise_verify_by,
    word_count,
)
from conductor.notes.secrets import MARKER_TEXT, Redaction, has_secret, redact
from conductor.storage.paths import project_key, valid_session

# A body whose non-whitespace characters are more than half secret, or that keeps fewer
# than MIN_WORDS_LEFT words once its secrets are redacted, is a credential dump, not a
# fact: refused rather than stored as a row of markers ("key id [redacted] secret
# [redacted]" says nothing worth keeping).
MOSTLY_SECRET = 0.5
MIN_WORDS_LEFT = 8
# Kinds that bind the assistant's behaviour towards the user.
RULE_KINDS = ("rule", "ruling")


class Reason:
    """Refusal reasons (the ``reason`` of a refused WriteResult)."""

    TITLE_EMPTY = "title_empty"
    TITLE_TOO_LONG = "title_too_long"
    BODY_TOO_LONG = "body_too_long"
    TAGS_TOO_LONG = "tags_too_long"
    SECRET = "secret"
    CAP_SESSION = "cap_session"
    CAP_USER = "cap_user"
    RULE_NEEDS_USER_MESSAGE = "rule_needs_user_message"
    UNKNOWN_KIND = "unknown_kind"
    UNKNOWN_SCOPE = "unknown_scope"
    PROJECT_REQUIRED = "project_required"
    SESSION_REQUIRED = "session_required"
    BAD_SESSION = "bad_session"
    VERIFY_BY_REQUIRED = "verify_by_required"
    BAD_VERIFY_BY = "bad_verify_by"
    REASON_REQUIRED = "reason_required"
    NOT_FOUND = "not_found"
    ARCHIVED = "archived"
    NOT_RATIFIED = "not_ratified"
    NOT_A_RULE = "not_a_rule"
    ALREADY_RATIFIED = "already_ratified"
    IO_ERROR = "io_error"
    LEASE_BUSY = "lease_busy"  # replicas: another replica is the user's writer now
    STALE_LEASE = "stale_lease"  # replicas: a newer writer's token was seen


@dataclass(frozen=True)
class NoteCaps:
    """The limits of the store. Tests may shrink them; the product uses the defaults."""

    title_chars: int = 120
    body_words: int = 400
    # Checked before any pattern runs: the secret check costs time per character, and a
    # body far past the word cap is refused whatever it holds.
    body_chars_per_word: int = 20

    @property
    def body_chars(self) -> int:
        return self.body_words * self.body_chars_per_word
    session_notes: int = 20
    user_notes: int = 500
    archive_days: int = 30


@dataclass(frozen=True)
class Refusal:
    reason: str
    detail: str


@dataclass
class WriteResult:
    """What a write did. ``ok`` False means refused; ``reason`` says why.

    ``op`` is the operation asked for; ``revised_existing`` is True when an ``add`` became
    a revision of a note already stored (same title or close BM25 match).
    ``kept_live`` is True when a model archived a ratified note: it stays live with the
    reason in its changelog until the user decides.
    """

    ok: bool
    reason: str | None
    note: Note | None
    op: str
    redactions: int = 0
    revised_existing: bool = False
    kept_live: bool = False
    detail: str | None = None
    redaction_counts: dict[str, int] = field(default_factory=dict)
    count: int = 0  # notes touched by delete_all
    retry_after: float | None = None  # lease_busy: when the lease may be free
    holder: str | None = None  # lease_busy: the replica that holds it


@dataclass
class Content:
    """Checked note content: clean title and tags, redacted body."""

    title: str
    body: str
    tags: list[str]
    kind: str
    verify_by: str | None
    redaction: Redaction = field(default_factory=lambda: Redaction(""))


@dataclass(frozen=True)
class ScopeRef:
    """Where a new note goes: scope, its key, and the conversation that writes it."""

    scope: str
    key: str | None
    project_path: str | None
    origin_session: str | None


def check_content(
    *,
    title: str,
    body: str,
    tags: Iterable[str] | str | None,
    kind: str,
    verify_by: Any,
    caps: NoteCaps,
) -> Content | Refusal:
    """Validate and redact one note's content, or say why it is refused."""
    if not isinstance(title, str) or not isinstance(body, str):
        raise TypeError("title and body must be str")
    if kind not in KINDS:
        return Refusal(Reason.UNKNOWN_KIND, f"kind must be one of {', '.join(KINDS)}")
    title = clean_title(title)
    if not title:
        return Refusal(Reason.TITLE_EMPTY, "a note needs a title")
    tag_list = clean_tags(tags)
    # The lengths first: no pattern runs on more text than a note may hold.
    if len(title) > caps.title_chars:
        return Refusal(
            Reason.TITLE_TOO_LONG, f"title has {len(title)} characters (max {caps.title_chars})"
        )
    if len(body) > caps.body_chars:
        return Refusal(Reason.BODY_TOO_LONG,
                       f"body has {len(body)} characters (max {caps.body_chars})")
    if sum(len(t) for t in tag_list) > caps.title_chars * 4:
        return Refusal(Reason.TAGS_TOO_LONG,
                       f"the tags hold more than {caps.title_chars * 4} characters")
    if has_secret(title) or any(has_secret(t) for t in tag_list):
        return Refusal(Reason.SECRET, "the title or a tag holds a secret")
    # Files are read back with universal newlines: store what will be read.
    body = body.replace("\r\n", "\n").replace("\r", "\n")
    redaction = redact(body.strip())
    if redaction.total and (redaction.secret_fraction > MOSTLY_SECRET
                            or word_count(MARKER_TEXT.sub(" ", redaction.text)) < MIN_WORDS_LEFT):
        return Refusal(Reason.SECRET, "the body is mostly secret")
    words = word_count(redaction.text)
    if words > caps.body_words:
        return Refusal(Reason.BODY_TOO_LONG, f"body has {words} words (max {caps.body_words})")
    try:
        verify = normalise_verify_by(verify_by)
    except (TypeError, ValueError):
        return Refusal(Reason.BAD_VERIFY_BY, "verify_by must be an ISO date or datetime")
    if kind == "program_state" and verify is None:
        return Refusal(Reason.VERIFY_BY_REQUIRED, "a program_state note needs verify_by")
    return Content(title, redaction.text, tag_list, kind, verify, redaction)


def resolve_scope(
    scope: str, project: str | os.PathLike[str] | None, session: str | None
) -> ScopeRef | Refusal:
    """The folder key of a scope: a project's ``<name>-<hash8>``, a session's id."""
    if scope not in SCOPES:
        return Refusal(Reason.UNKNOWN_SCOPE, f"scope must be one of {', '.join(SCOPES)}")
    if session is not None and not valid_session(session):
        return Refusal(Reason.BAD_SESSION, "session ids are letters, digits, '.', '_', '-'")
    if scope == "project":
        if not project:
            return Refusal(Reason.PROJECT_REQUIRED, "a project note needs the project's path")
        key, path = project_key(project)
        return ScopeRef("project", key, path, session)
    if scope == "session":
        if session is None:
            return Refusal(Reason.SESSION_REQUIRED, "a session note needs the session id")
        return ScopeRef("session", session, None, session)
    return ScopeRef("user", None, None, session)


def needs_user_message(kind: str, scope: str, source: str, has_user_message: bool) -> bool:
    """True when this write of a rule about the user must be refused.

    A rule or ruling about the user stands for the user's own word: it needs the user's
    message in the turn. The background writer never has one (it reads a finished
    session in a hidden turn), whatever the caller says.
    """
    if kind not in RULE_KINDS or scope != "user":
        return False
    return source == "writer" or not has_user_message


def clean_reason(text: str) -> str:
    """A changelog reason on one line, its secrets redacted."""
    return redact(" ".join(text.split())).text
