"""The checks every profile key goes through: a wrong type or an unknown choice stops the
load with a `ProfileError` naming the file and the key."""

from __future__ import annotations

from pathlib import Path
from typing import Any

MEMORY_MODES = ("off", "shadow", "on")


class ProfileError(ValueError):
    """A profile that cannot be used; the message names the file and the key."""


def type_names(types: tuple[type, ...]) -> str:
    names = {int: "an integer", float: "a number", str: "a string", bool: "true or false",
             dict: "a mapping", type(None): "null"}
    return " or ".join(names[t] for t in types)


def check_type(path: Path, key: str, value: Any, types: tuple[type, ...]) -> None:
    ok = isinstance(value, types) and not (isinstance(value, bool) and bool not in types)
    if not ok:
        raise ProfileError(
            f"{path}: key '{key}' must be {type_names(types)}, got {type(value).__name__} "
            f"{value!r}"
        )


def memory_mode(path: Path, key: str, value: Any) -> str:
    if value is True:
        value = "on"
    elif value is False:
        value = "off"
    if value not in MEMORY_MODES:
        raise ProfileError(f"{path}: key '{key}' must be one of {', '.join(MEMORY_MODES)}, "
                           f"got {value!r}")
    return value


def check_choice(path: Path, key: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ProfileError(f"{path}: key '{key}' must be one of {', '.join(choices)}, "
                           f"got {value!r}")
