"""A user's name as a request's header gives it. The rule from a name to the one folder
(and prefix-cache salt) that is theirs is `conductor.storage.paths.user_folder`, beside
`valid_user`: the CLI's --user files users by it too. It is named here as well, where the
server has always found it."""

from __future__ import annotations

from conductor.memory.types import UserNameError, user_folder

__all__ = ["UserNameError", "header_text", "user_folder"]


def header_text(value: str) -> str:
    """A header's value as its sender wrote it: HTTP servers hand header bytes over as
    Latin-1, and clients send a name such as `josé` as UTF-8 bytes."""
    try:
        return value.encode("latin-1").decode("utf-8")
    except (UnicodeEncodeError, UnicodeDecodeError):
        return value
